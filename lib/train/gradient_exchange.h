// hpcnn train: the gradient exchange of data-parallel training: every rank's parameter gradients
// are packed into one fused buffer (dist/fused_layout.h: dense, or the non-zero positions of a
// pruned model), summed with one allreduce and averaged over the world size and the gradient
// accumulation steps.
#pragma once

#include <vector>

#include "dist/communicator.h"
#include "dist/fused_layout.h"
#include "nn/model.h"

namespace hpcnn::train {

// The layout of a model's parameters: dense, or (sparse) the non-zero positions of every
// parameter of rank >= 2 (or of `masks`, same order and shapes: then the masked-out weights are
// set to zero, so that they stay zero).
dist::FusedLayout parameter_layout(std::vector<nn::Parameter>& params, bool sparse, const std::vector<Tensor>* masks = nullptr);

class GradientExchange {
 public:
  GradientExchange(dist::Communicator& comm, dist::FusedLayout layout);
  // Packs every Parameter::grad, allreduces, and divides by world size * `local_steps`. The
  // averaged, compacted gradients are then in fused() at layout().offset[k].
  void exchange(const std::vector<nn::Parameter>& params, int local_steps);
  const std::vector<float>& fused() const { return fused_; }
  const dist::FusedLayout& layout() const { return layout_; }
  size_t bytes_per_step() const { return layout_.total * sizeof(float); }

 private:
  dist::Communicator& comm_;
  dist::FusedLayout layout_;
  std::vector<float> fused_;
};

}  // namespace hpcnn::train
