// hpcnn dist: gradient exchange of data-parallel training: every rank's gradients are packed
// into one fused buffer, summed with one allreduce and averaged over the world size.
//
// Sparse mode (Singh & Bhatele, "Exploiting sparsity in pruned neural networks to optimize
// large model training", arXiv 2302.05045): for a pruned model, only the non-zero positions of
// each weight tensor (rank >= 2) are packed. The positions are fixed at start from the weights
// (or a mask) and are identical on every rank, so no indices travel: the buffer holds just the
// values, in position order. Rank <= 1 tensors (biases, BatchNormalization) stay dense.
#pragma once

#include <cstdint>
#include <vector>

#include "dist/communicator.h"
#include "nn/model.h"

namespace hpcnn::dist {

// Which elements of each parameter train and travel.
struct ParamLayout {
  std::vector<std::vector<int64_t>> positions;  // per parameter; used when !dense[k]
  std::vector<bool> dense;
  std::vector<size_t> offset;                   // start of parameter k in the fused buffer
  size_t total = 0;                             // elements in the fused buffer
  size_t full = 0;                              // elements of all parameters (dense size)
};

ParamLayout dense_layout(const std::vector<nn::Parameter>& params);
// Non-zero positions of rank >= 2 parameters; `masks` (optional, same order and shapes) give
// the positions instead of the weights' own zeros, and masked weights are set to zero.
ParamLayout sparse_layout(std::vector<nn::Parameter>& params, const std::vector<Tensor>* masks = nullptr);

class GradientExchange {
 public:
  GradientExchange(Communicator& comm, ParamLayout layout);
  // Packs every Parameter::grad, allreduces, and divides by world size * `local_steps` (the
  // gradient accumulation steps already summed in grad). The averaged, compacted gradients
  // are then in fused() at layout().offset[k].
  void exchange(const std::vector<nn::Parameter>& params, int local_steps);
  const std::vector<float>& fused() const { return fused_; }
  const ParamLayout& layout() const { return layout_; }
  size_t bytes_per_step() const { return layout_.total * sizeof(float); }

 private:
  Communicator& comm_;
  ParamLayout layout_;
  std::vector<float> fused_;
};

// Packs values of parameter k per the layout into dst (layout.offset[k] onwards) / unpacks.
void pack(const ParamLayout& layout, size_t k, const Tensor& src, float* dst);
void unpack(const ParamLayout& layout, size_t k, const float* src, Tensor& dst);

}  // namespace hpcnn::dist
