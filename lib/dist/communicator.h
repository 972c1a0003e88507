// hpcnn dist: the communicator interface of data-parallel training, so that the trainer does
// not depend on MPI or NCCL. Implementations: MPI (CPU buffers; built when MPI is found) and a
// single-process one (world size 1, used without mpirun or in builds without MPI). An NCCL
// implementation for device buffers will sit beside them.
//
// Collective calls must be made by every rank in the same order. Failures throw hpcnn::Error
// with ErrorKind::device naming the call and the rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hpcnn::dist {

class NodeBuffer;  // dist/node_buffer.h

// A non-blocking point-to-point operation in flight (isend / irecv). wait() blocks until it is
// complete (the buffer may then be reused or read); destroying a request that was not waited for
// releases it without waiting (only on error paths: the buffer must outlive the transfer).
class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This rank among the ranks on its node, and how many ranks the node runs (MPI:
  // MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), not launcher environment variables): the local rank
  // picks the GPU of a rank, the local size divides the node's cores (core/threads.h).
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  // The nodes of the job (the ranks whose local_rank() is 0 lead one each) and whether every node
  // runs the same number of ranks (local_size()); the hierarchical allreduce needs that.
  virtual int node_count() const = 0;
  virtual bool nodes_uniform() const = 0;
  // The node's host name, for messages ("rank 3 on node07").
  virtual std::string host() const = 0;
  virtual std::string backend() const = 0;  // "mpi" or "single"
  // In-place sums over all ranks.
  virtual void allreduce_sum(float* data, size_t count) = 0;
  virtual void allreduce_sum(double* data, size_t count) = 0;
  virtual void allreduce_max(int64_t* data, size_t count) = 0;
  // The same sums by the hierarchical allreduce (dist/hierarchical.h: reduce-scatter inside the
  // node, allreduce of one shard per node across nodes, allgather inside the node). Needs
  // nodes_uniform() (ErrorKind::usage otherwise, on every rank alike); dist::choose_sum_algorithm
  // says when to use it.
  virtual void hierarchical_allreduce_sum(float* data, size_t count) = 0;
  virtual void hierarchical_allreduce_sum(double* data, size_t count) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Every rank's value, indexed by rank.
  virtual std::vector<uint64_t> allgather(uint64_t value) = 0;
  // Point to point (MPI_Sendrecv): `n_send` floats to rank `dest` and `n_recv` floats from rank
  // `source` (-1: no send, or no receive). The spatial split's halo exchange and slab allgather
  // (spatial/group.h) between the consecutive ranks of a group.
  virtual void sendrecv(const float* send, size_t n_send, int dest, float* recv, size_t n_recv, int source) = 0;
  // Non-blocking point to point (MPI_Isend / MPI_Irecv): `count` floats to or from rank `peer`
  // of this communicator, matched by `tag` (0 <= tag < 32768, MPI's guaranteed minimum of
  // MPI_TAG_UB; the pipeline uses the micro-batch and the direction). The buffer must stay alive
  // and untouched until wait() returns. The pipeline's stage-to-stage activations and gradients
  // (train/pipeline_schedule.h). A world of one has no peer: ErrorKind::usage.
  virtual std::unique_ptr<Request> isend(const float* data, size_t count, int peer, int tag) = 0;
  virtual std::unique_ptr<Request> irecv(float* data, size_t count, int peer, int tag) = 0;
  // MPI_Comm_split: the ranks that pass the same `color` (>= 0) form one new communicator, ordered
  // by `key` (then by rank here). Collective over this communicator. The pipeline's replicas of a
  // stage allreduce their gradients in one (train/gradient_exchange.h).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  virtual void barrier() = 0;
  // Node-local collectives (every rank of the node calls them, in the same order; the nodes
  // independently of each other). node_broadcast: `bytes` bytes from the node's local rank 0 to the
  // node's other ranks. node_shared: a block of memory that the node's ranks share (MPI-3:
  // MPI_Win_allocate_shared on the node communicator, freed with the window, so never outliving the
  // job), of the size local rank 0 gives (the others' `bytes` is ignored); local rank 0 writes it
  // through `fill` (called on local rank 0 only), then every rank of the node gets it read-only
  // (dist/node_buffer.h). When the MPI library gives no shared window (every rank of the node
  // alike): nullptr with the reason in *unavailable (fill not called), or ErrorKind::device when
  // `unavailable` is null. The defaults are for a node of one rank (ordinary memory); a failed
  // allocation throws ErrorKind::device naming the size, node and rank.
  virtual void node_broadcast(void* data, size_t bytes);
  virtual std::shared_ptr<const NodeBuffer> node_shared(size_t bytes, const std::function<void(void*)>& fill,
                                                        std::string* unavailable = nullptr);
  // Ends every rank of the job at once (MPI_Abort) with exit status `code`.
  [[noreturn]] virtual void abort(int code) = 0;
};

// MPI when this build has it (initialising MPI; a plain run without mpirun is a world of one),
// the single-process communicator otherwise.
std::unique_ptr<Communicator> make_communicator(int* argc, char*** argv);
std::unique_ptr<Communicator> make_single_communicator();
bool have_mpi();

}  // namespace hpcnn::dist
