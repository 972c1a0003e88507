// The world of one: collectives are no-ops.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "dist/communicator.h"

namespace hpcnn::dist {

namespace {
std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown host";
  return name;
}

[[noreturn]] std::unique_ptr<Request> no_peer() {
  throw_error(ErrorKind::usage, "point-to-point transfer in a world of one: there is no other rank");
}

class Single final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  int node_count() const override { return 1; }
  bool nodes_uniform() const override { return true; }
  std::string host() const override { return host_name(); }
  std::string backend() const override { return "single"; }
  void sendrecv(const float* send, size_t n_send, int dest, float* recv, size_t n_recv, int source) override {
    if (dest > 0 || source > 0 || (dest == 0) != (source == 0) || (dest == 0 && n_send != n_recv))
      throw_error(ErrorKind::usage, "sendrecv in a world of one: only rank 0 to itself");
    if (dest == 0) std::copy_n(send, n_send, recv);
  }
  void allreduce_sum(float*, size_t) override {}
  void allreduce_sum(double*, size_t) override {}
  void allreduce_max(int64_t*, size_t) override {}
  void hierarchical_allreduce_sum(float*, size_t) override {}
  void hierarchical_allreduce_sum(double*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  std::vector<uint64_t> allgather(uint64_t v) override { return {v}; }
  std::unique_ptr<Request> isend(const float*, size_t, int, int) override { return no_peer(); }
  std::unique_ptr<Request> irecv(float*, size_t, int, int) override { return no_peer(); }
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<Single>(); }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
};
}  // namespace

std::unique_ptr<Communicator> make_single_communicator() { return std::make_unique<Single>(); }

#ifndef HPCNN_HAVE_MPI
bool have_mpi() { return false; }
std::unique_ptr<Communicator> make_communicator(int*, char***) { return make_single_communicator(); }
#endif

}  // namespace hpcnn::dist
