// The MPI communicator (CPU buffers, MPI_COMM_WORLD). Large buffers are reduced in pieces of
// at most 2^30 elements (MPI counts are int). The hierarchical allreduce (dist/hierarchical.h)
// runs on the node communicator and a cross communicator, both made here at start.
#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "core/error.h"
#include "dist/communicator.h"
#include "dist/hierarchical_mpi.h"
#include "dist/node_buffer_mpi.h"

namespace hpcnn::dist {

namespace {

std::string host_name() {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  if (MPI_Get_processor_name(name, &len) != MPI_SUCCESS) return "unknown host";
  return std::string(name, static_cast<size_t>(len));
}

void check(int rc, const char* call, int rank) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw_error(ErrorKind::device, std::string(call) + " failed on rank " + std::to_string(rank) + ": " + std::string(msg, len));
}

class MpiRequest final : public Request {
 public:
  MpiRequest(MPI_Request r, const char* call, int rank) : r_(r), call_(call), rank_(rank) {}
  ~MpiRequest() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (r_ != MPI_REQUEST_NULL && !finalized) MPI_Request_free(&r_);
  }
  void wait() override {
    if (r_ == MPI_REQUEST_NULL) return;
    check(MPI_Wait(&r_, MPI_STATUS_IGNORE), call_, rank_);
  }

 private:
  MPI_Request r_;
  const char* call_;
  int rank_;
};

class Mpi final : public Communicator {
 public:
  Mpi(int* argc, char*** argv) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread", -1);
      owner_ = true;
    }
    init(MPI_COMM_WORLD);
  }
  // A communicator made by split(): this object frees it.
  explicit Mpi(MPI_Comm comm) : own_comm_(true) { init(comm); }

  void init(MPI_Comm comm) {
    comm_ = comm;
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // The ranks that share this node's memory: their number and this rank's place among them
    // (or the test split of HPCNN_TEST_NODE_SPLIT, dist/hierarchical.h).
    node_ = detail::split_nodes(comm_, rank_);
    MPI_Comm_set_errhandler(node_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(node_, &local_rank_);
    MPI_Comm_size(node_, &local_size_);
    // The cross communicator: one rank per node, the ranks with this local rank.
    check(MPI_Comm_split(comm_, local_rank_, rank_, &cross_), "MPI_Comm_split", rank_);
    MPI_Comm_set_errhandler(cross_, MPI_ERRORS_RETURN);
    // Every rank's local rank and local size: the node count and whether the nodes are equal.
    int mine[2] = {local_rank_, local_size_};
    std::vector<int> all(2 * static_cast<size_t>(size_));
    check(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, comm_), "MPI_Allgather", rank_);
    for (int r = 0; r < size_; ++r) {
      nodes_ += all[2 * static_cast<size_t>(r)] == 0;
      uniform_ = uniform_ && all[2 * static_cast<size_t>(r) + 1] == local_size_;
    }
    host_ = host_name();
  }
  ~Mpi() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && cross_ != MPI_COMM_NULL) MPI_Comm_free(&cross_);
    if (!finalized && node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
    if (!finalized && own_comm_) MPI_Comm_free(&comm_);
    if (owner_ && !finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  int node_count() const override { return nodes_; }
  bool nodes_uniform() const override { return uniform_; }
  std::string host() const override { return host_; }
  std::string backend() const override { return "mpi"; }

  template <class T>
  void reduce(T* data, size_t count, MPI_Datatype type, MPI_Op op, const char* call) {
    constexpr size_t piece = size_t{1} << 30;
    for (size_t off = 0; off < count; off += piece) {
      const int n = static_cast<int>(std::min(piece, count - off));
      check(MPI_Allreduce(MPI_IN_PLACE, data + off, n, type, op, comm_), call, rank_);
    }
  }
  void allreduce_sum(float* d, size_t n) override { reduce(d, n, MPI_FLOAT, MPI_SUM, "MPI_Allreduce"); }
  void allreduce_sum(double* d, size_t n) override { reduce(d, n, MPI_DOUBLE, MPI_SUM, "MPI_Allreduce"); }
  void allreduce_max(int64_t* d, size_t n) override { reduce(d, n, MPI_INT64_T, MPI_MAX, "MPI_Allreduce"); }
  void hierarchical(void* d, size_t n, MPI_Datatype type, size_t elem_bytes) {
    if (!uniform_)
      throw_error(ErrorKind::usage, "hierarchical allreduce on rank " + std::to_string(rank_) + ": the " +
                                        std::to_string(nodes_) +
                                        " nodes run unequal numbers of ranks (it needs the same number on every node)");
    int rc = MPI_SUCCESS;
    if (const char* call = detail::hierarchical_sum(d, n, type, elem_bytes, node_, cross_, scratch_, &rc)) check(rc, call, rank_);
  }
  void hierarchical_allreduce_sum(float* d, size_t n) override { hierarchical(d, n, MPI_FLOAT, sizeof(float)); }
  void hierarchical_allreduce_sum(double* d, size_t n) override { hierarchical(d, n, MPI_DOUBLE, sizeof(double)); }
  void broadcast(void* data, size_t bytes, int root) override {
    constexpr size_t piece = size_t{1} << 30;
    char* p = static_cast<char*>(data);
    for (size_t off = 0; off < bytes; off += piece) {
      const int n = static_cast<int>(std::min(piece, bytes - off));
      check(MPI_Bcast(p + off, n, MPI_BYTE, root, comm_), "MPI_Bcast", rank_);
    }
  }
  std::vector<uint64_t> allgather(uint64_t v) override {
    std::vector<uint64_t> out(static_cast<size_t>(size_));
    check(MPI_Allgather(&v, 1, MPI_UINT64_T, out.data(), 1, MPI_UINT64_T, comm_), "MPI_Allgather", rank_);
    return out;
  }
  void sendrecv(const float* send, size_t n_send, int dest, float* recv, size_t n_recv, int source) override {
    if (n_send > static_cast<size_t>(INT_MAX) || n_recv > static_cast<size_t>(INT_MAX))
      throw_error(ErrorKind::usage, "MPI_Sendrecv of more than 2^31 floats on rank " + std::to_string(rank_));
    check(MPI_Sendrecv(send, static_cast<int>(n_send), MPI_FLOAT, dest < 0 ? MPI_PROC_NULL : dest, 43, recv, static_cast<int>(n_recv),
                       MPI_FLOAT, source < 0 ? MPI_PROC_NULL : source, 43, comm_, MPI_STATUS_IGNORE),
          "MPI_Sendrecv", rank_);
  }
  // Waits without spinning (MPI_Ibcast, tested every millisecond): the node's other ranks wait here
  // while its local rank 0 decodes, and leave the node's cores to the decoder's threads.
  void node_broadcast(void* data, size_t bytes) override {
    constexpr size_t piece = size_t{1} << 30;
    char* p = static_cast<char*>(data);
    for (size_t off = 0; off < bytes; off += piece) {
      MPI_Request req = MPI_REQUEST_NULL;
      check(MPI_Ibcast(p + off, static_cast<int>(std::min(piece, bytes - off)), MPI_BYTE, 0, node_, &req), "MPI_Ibcast (node)",
            rank_);
      for (int done = 0;;) {
        check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test (node broadcast)", rank_);
        if (done) break;
        const timespec ms{0, 1000000};
        ::nanosleep(&ms, nullptr);
      }
    }
  }
  std::shared_ptr<const NodeBuffer> node_shared(size_t bytes, const std::function<void(void*)>& fill,
                                                std::string* unavailable) override {
    return detail::node_shared_window(node_, bytes, fill, "rank " + std::to_string(rank_) + " on " + host_, unavailable);
  }
  std::unique_ptr<Request> isend(const float* data, size_t count, int peer, int tag) override {
    check_p2p(count, peer, "MPI_Isend");
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Isend(data, static_cast<int>(count), MPI_FLOAT, peer, tag, comm_, &r), "MPI_Isend", rank_);
    return std::make_unique<MpiRequest>(r, "MPI_Wait (MPI_Isend)", rank_);
  }
  std::unique_ptr<Request> irecv(float* data, size_t count, int peer, int tag) override {
    check_p2p(count, peer, "MPI_Irecv");
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Irecv(data, static_cast<int>(count), MPI_FLOAT, peer, tag, comm_, &r), "MPI_Irecv", rank_);
    return std::make_unique<MpiRequest>(r, "MPI_Wait (MPI_Irecv)", rank_);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm c = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &c), "MPI_Comm_split", rank_);
    return std::make_unique<Mpi>(c);
  }
  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier", rank_); }
  void check_p2p(size_t count, int peer, const char* call) const {
    if (count > static_cast<size_t>(INT_MAX))
      throw_error(ErrorKind::usage, std::string(call) + " of more than 2^31 floats on rank " + std::to_string(rank_));
    if (peer < 0 || peer >= size_ || peer == rank_)
      throw_error(ErrorKind::usage, std::string(call) + " on rank " + std::to_string(rank_) + " to rank " + std::to_string(peer) +
                                        " of " + std::to_string(size_));
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  MPI_Comm comm_ = MPI_COMM_WORLD;
  bool own_comm_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  int nodes_ = 0;
  bool uniform_ = true;
  MPI_Comm node_ = MPI_COMM_NULL, cross_ = MPI_COMM_NULL;
  std::vector<unsigned char> scratch_;  // this rank's shard of the hierarchical allreduce
  std::string host_;
  bool owner_ = false;
};

}  // namespace

bool have_mpi() { return true; }

std::unique_ptr<Communicator> make_communicator(int* argc, char*** argv) { return std::make_unique<Mpi>(argc, argv); }

}  // namespace hpcnn::dist
