#include "spatial/group.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/error.h"

namespace hpcnn::spatial {

SpatialGroup::SpatialGroup(dist::Communicator& comm, int slabs) : comm_(comm), slabs_(slabs) {
  if (slabs < 1 || comm.size() % slabs != 0)
    throw_error(ErrorKind::usage, "parallel.spatial " + std::to_string(slabs) + " does not divide the " + std::to_string(comm.size()) +
                                      " ranks (groups of S consecutive ranks share a sample)");
  slab_ = comm.rank() % slabs;
  replica_ = comm.rank() / slabs;
  replicas_ = comm.size() / slabs;
  first_ = comm.rank() - slab_;
}

void SpatialGroup::exchange(const float* to_prev, size_t n_to_prev, const float* to_next, size_t n_to_next, float* from_prev,
                            size_t n_from_prev, float* from_next, size_t n_from_next) {
  const auto t0 = std::chrono::steady_clock::now();
  const int prev = slab_ > 0 ? comm_.rank() - 1 : -1, next = slab_ + 1 < slabs_ ? comm_.rank() + 1 : -1;
  // Downwards (to the previous slab, from the next), then upwards: every rank's pair matches its
  // neighbours', so neither can block.
  comm_.sendrecv(to_prev, prev >= 0 ? n_to_prev : 0, prev, from_next, next >= 0 ? n_from_next : 0, next);
  comm_.sendrecv(to_next, next >= 0 ? n_to_next : 0, next, from_prev, prev >= 0 ? n_from_prev : 0, prev);
  halo_bytes_ += ((prev >= 0 ? n_to_prev : 0) + (next >= 0 ? n_to_next : 0)) * sizeof(float);
  halo_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void SpatialGroup::allgather(const float* mine, size_t count, float* all) {
  std::copy_n(mine, count, all + static_cast<size_t>(slab_) * count);
  const int to = first_ + (slab_ + 1) % slabs_, from = first_ + (slab_ + slabs_ - 1) % slabs_;
  // Ring: at step k, pass on the block of slab (slab - k) and receive that of slab (slab - k - 1).
  for (int k = 0; k + 1 < slabs_; ++k) {
    const size_t send = static_cast<size_t>((slab_ - k + slabs_) % slabs_), recv = static_cast<size_t>((slab_ - k - 1 + 2 * slabs_) % slabs_);
    comm_.sendrecv(all + send * count, count, to, all + recv * count, count, from);
  }
}

}  // namespace hpcnn::spatial
