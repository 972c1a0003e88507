// hpcnn dist, internal to the MPI communicator: the hierarchical allreduce (dist/hierarchical.h)
// over a node communicator and a cross communicator (one rank per node, the ranks with the same
// local rank), and the node split it runs on.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace hpcnn::dist::detail {

// The node communicator of `world`: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), or the test split
// HPCNN_TEST_NODE_SPLIT names (block:K, cyclic:N; ErrorKind::usage for another value).
MPI_Comm split_nodes(MPI_Comm world, int rank);

// In-place sum over every rank of `data` (count elements of `type`, MPI_FLOAT or MPI_DOUBLE, of
// elem_bytes each): reduce-scatter in `node` into shards of ceil(count / L) elements (the last
// ones shorter or empty), allreduce of this rank's shard in `cross`, allgather in `node`. Counts
// of any size (pieces of at most 2^30 elements). `scratch` keeps the shard between calls. Returns
// the name of a failed MPI call, or nullptr.
const char* hierarchical_sum(void* data, size_t count, MPI_Datatype type, size_t elem_bytes, MPI_Comm node, MPI_Comm cross,
                             std::vector<unsigned char>& scratch, int* rc);

}  // namespace hpcnn::dist::detail
