// hpcnn train: the gradient exchange of data-parallel training: every rank's parameter gradients
// are packed into one fused buffer (dist/fused_layout.h: dense, or the non-zero positions of a
// pruned model), summed with one allreduce and averaged over the world size and the gradient
// accumulation steps. The fused buffer lives on the parameters' device and is packed and scaled
// by the ops kernels of that device (ops/update.h); the communicator reduces it in place (MPI:
// host memory; NCCL: device memory), by the flat or the hierarchical allreduce
// (dist/hierarchical.h; the configuration's exchange.algorithm), dense and sparse layouts alike.
#pragma once

#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/fused_layout.h"
#include "dist/hierarchical.h"
#include "nn/model.h"

namespace hpcnn::train {

// The layout of a model's parameters: dense, or (sparse) the non-zero positions of every
// parameter of rank >= 2 (or of `masks`, same order and shapes: then the masked-out weights are
// set to zero, so that they stay zero). `eligible` (same order; with `masks`): which parameters may
// be sparse instead of those of rank >= 2 (the pipeline's masked channels fix entries of biases and
// BatchNormalization parameters too).
dist::FusedLayout parameter_layout(std::vector<nn::Parameter>& params, bool sparse, const std::vector<Tensor>* masks = nullptr,
                                   const std::vector<bool>* eligible = nullptr);

// The positions of a sparse buffer of the layout as an i32 tensor on `device` (undefined for dense).
std::vector<Tensor> position_tensors(const dist::FusedLayout& layout, const Device& device);

class GradientExchange {
 public:
  // algorithm: "flat", "hierarchical" or "auto" (dist::choose_sum_algorithm; the choice and its
  // reason are logged, a hierarchical request on unequal nodes falls back to flat with a warning).
  // The sparse positions move from the layout onto `device` as i32 tensors (positions()): one copy
  // of them exists, and layout() keeps the offsets and counts only (dist::pack/unpack refuse its
  // sparse buffers; scatter/gather with positions() instead).
  GradientExchange(dist::Communicator& comm, dist::FusedLayout layout, const Device& device = Device::cpu(),
                   const std::string& algorithm = "auto");
  // Packs every Parameter::grad, allreduces, and divides by world size * `local_steps`. The
  // averaged, compacted gradients are then in fused() at layout().offset[k].
  void exchange(const std::vector<nn::Parameter>& params, int local_steps);
  // Spatial split (nn/spatial.h): the fused values from `from` on (a suffix of the buffer: the
  // gradients of the layers after the slab gather) are the same on the S ranks of a group. They
  // are summed over `replicas` only (the R / S ranks that hold the same slab of every replica,
  // MPI_Comm_split by slab; nullptr when there is one replica: nothing to sum) and divided by its
  // size * `local_steps`; the values before `from` go through the allreduce over all ranks as
  // before. Same result as summing the suffix over all ranks (S equal copies per replica) and
  // dividing by the world size, without moving the S - 1 redundant copies. `from` == layout().total:
  // off (the default). ErrorKind::usage when `from` lies beyond the buffer.
  void set_replicated_suffix(size_t from, dist::Communicator* replicas);
  const Tensor& fused() const { return fused_; }
  const dist::FusedLayout& layout() const { return layout_; }
  const std::vector<Tensor>& positions() const { return positions_; }
  // The bytes this rank allreduces per step (the fused buffer, less a replicated suffix that has
  // no other replica to meet).
  size_t bytes_per_step() const {
    return (replicas_ || replicated_from_ == layout_.total ? layout_.total : replicated_from_) * sizeof(float);
  }
  const dist::SumChoice& algorithm() const { return algorithm_; }

 private:
  dist::Communicator& comm_;
  dist::FusedLayout layout_;
  dist::SumChoice algorithm_;
  std::vector<Tensor> positions_;
  Tensor fused_;
  size_t replicated_from_ = 0;  // = layout_.total in the constructor
  dist::Communicator* replicas_ = nullptr;
};

}  // namespace hpcnn::train
