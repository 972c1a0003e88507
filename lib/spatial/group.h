// hpcnn spatial: the spatial split's group (nn/spatial.h) over the job's communicator: ranks form
// groups of S consecutive ranks (consecutive ranks share a sample, so a scheduler's block
// placement keeps a group on a node, as Fugaku's rank map did); rank r holds slab r mod S of
// replica r / S. Halo planes travel between neighbouring ranks by MPI_Sendrecv (to the previous
// slab, then to the next); the slab allgather is a ring of S - 1 MPI_Sendrecv steps inside the
// group. Every call is made by all ranks of the group in the same order (the model's forward and
// backward run in lockstep on them). Errors: dist::Communicator's (ErrorKind::device naming the
// call and the rank); ErrorKind::usage when S does not divide the world size.
#pragma once

#include <cstdint>

#include "dist/communicator.h"
#include "nn/spatial.h"

namespace hpcnn::spatial {

class SpatialGroup final : public nn::SlabExchange {
 public:
  SpatialGroup(dist::Communicator& comm, int slabs);
  int slab() const override { return slab_; }
  int slabs() const override { return slabs_; }
  int replica() const { return replica_; }    // r / S
  int replicas() const { return replicas_; }  // R / S
  void exchange(const float* to_prev, size_t n_to_prev, const float* to_next, size_t n_to_next, float* from_prev,
                size_t n_from_prev, float* from_next, size_t n_from_next) override;
  void allgather(const float* mine, size_t count, float* all) override;
  uint64_t halo_bytes_sent() const override { return halo_bytes_; }
  double halo_seconds() const override { return halo_seconds_; }

 private:
  dist::Communicator& comm_;
  int slabs_, slab_, replica_, replicas_, first_;  // first_: the group's first rank
  uint64_t halo_bytes_ = 0;
  double halo_seconds_ = 0;
};

}  // namespace hpcnn::spatial
