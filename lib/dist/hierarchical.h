// hpcnn dist: which allreduce sums the gradients: flat (one MPI_Allreduce over every rank) or
// hierarchical (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE; Sergeev & Del Balso, arXiv 1802.05799):
//   1. reduce-scatter inside the node (MPI_Comm_split_type SHARED): local rank i of L ends with
//      the node's sum of shard i, shards of ceil(count / L) elements (the buffer padded to a
//      multiple of L, as Horovod does; the pad is implied by the counts, never stored or sent);
//   2. allreduce of that shard across the nodes, among the ranks with the same local rank (the
//      cross communicator: one rank per node);
//   3. allgather of the shards inside the node.
// Each node then sends 2 * count * (N - 1) / N elements across nodes in step 2 when the MPI runs
// it as a ring or Rabenseifner allreduce (its L ranks each carry 1/L of it), whatever the rank
// placement; the flat allreduce's inter-node traffic depends on its algorithm and the placement
// (issue 44, 1 MiB over 2 nodes x 4 ranks: 2 to 14 MiB, against 2 MiB). Needs the same number of
// ranks on every node (the shards of step 2 must match across nodes).
//
// Summation order differs from the flat allreduce, so float results differ in the last bits; the
// bound (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., §4.2: any summation
// tree of height h has |error| <= gamma_h * sum |x_i|, gamma_h = h u / (1 - h u)): over P = N * L
// ranks the flat sum has h <= P - 1, the hierarchical one h <= (L - 1) + (N - 1), so the two
// differ by at most (gamma_{P-1} + gamma_{L+N-2}) * sum_i |x_i| per element (u = 2^-24 for float,
// 2^-53 for double). Integer-valued sums whose partial sums stay exact (|.| <= 2^24 in float) are
// bitwise equal. Every rank gets the same bits (step 3 copies one result to all).
//
// Test hook: HPCNN_TEST_NODE_SPLIT=block:K (node = rank / K) or cyclic:N (node = rank % N) makes
// the MPI communicator treat MPI_COMM_WORLD as split into such "nodes" instead of the shared-memory
// split (local_rank, local_size, node_count follow it), so that the cross-node path runs on one
// host. dist-train's log line of the chosen algorithm shows the node count it sees.
#pragma once

#include <cstddef>
#include <string>

#include "dist/communicator.h"

namespace hpcnn::dist {

enum class SumAlgorithm { flat, hierarchical };
const char* to_string(SumAlgorithm a);

struct SumChoice {
  SumAlgorithm algorithm = SumAlgorithm::flat;
  std::string reason;    // why, for the log ("2 nodes x 4 ranks")
  bool warning = false;  // the request could not be followed (hierarchical on unequal nodes)
};

// requested: "flat", "hierarchical" or "auto" (ErrorKind::usage otherwise). auto picks
// hierarchical only with more than one node and more than one rank on every node. hierarchical
// on nodes with unequal rank counts falls back to flat with warning = true. Pure: the same answer
// on every rank for the same topology.
SumChoice choose_sum_algorithm(const std::string& requested, int nodes, int local_size, bool nodes_uniform);
SumChoice choose_sum_algorithm(const std::string& requested, const Communicator& comm);

// exchange.algorithm auto where the rule above picks hierarchical (more than one node, more than
// one rank on each): the two algorithms are timed on the job's own buffer, `count` floats at the
// host pointer `data` (overwritten with zeros), so that auto never keeps the slower one (issue 44:
// with block placement on 2 nodes Open MPI's Rabenseifner already moves what the hierarchical
// algorithm moves, and the extra phases can lose). One warm-up call each, then `rounds` alternating
// calls; a call's time is the slowest rank's; hierarchical only when its median is lower. Every
// rank gets the same answer (the times are maxima over all ranks). Bitwise reproducible runs set
// flat or hierarchical: the measured choice can differ between runs. Other requests and
// topologies: the rule's answer, unmeasured. Collective: every rank calls it.
SumChoice choose_sum_algorithm_measured(const std::string& requested, Communicator& comm, float* data, size_t count,
                                        int rounds = 5);

// comm.allreduce_sum or comm.hierarchical_allreduce_sum.
void allreduce_sum(Communicator& comm, float* data, size_t count, SumAlgorithm algorithm);
void allreduce_sum(Communicator& comm, double* data, size_t count, SumAlgorithm algorithm);

}  // namespace hpcnn::dist
