// hpcnn dist: the layout of one fused buffer that carries many flat buffers (a model's
// gradients) through one collective: buffer k occupies [offset[k], offset[k] + its count).
//
// Sparse mode (Singh & Bhatele, "Exploiting sparsity in pruned neural networks to optimize
// large model training", arXiv 2302.05045): for a pruned model only the non-zero positions of
// each eligible buffer (weight tensors of rank >= 2) travel. The positions are fixed at start
// from the values (or a mask) and are identical on every rank, so no indices travel: the fused
// buffer holds just the values, in position order. Other buffers (biases, BatchNormalization)
// stay dense. Flat buffers only: this module knows no tensors or models.
//
// Positions are i32 offsets within their own buffer (4 bytes per kept element, half of i64's:
// next to the 4-byte f32 state they index, the index is the larger part of a compact optimizer's
// memory); a sparse buffer of 2^31 or more elements is refused (ErrorKind::unsupported).
// A holder may move the positions elsewhere (train::GradientExchange puts them on the device as
// tensors and keeps one copy only): pack/unpack then refuse that buffer (ErrorKind::usage).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace hpcnn::dist {

struct FusedLayout {
  std::vector<std::vector<int32_t>> positions;  // per buffer, ascending; used when !dense[k]
  std::vector<bool> dense;
  std::vector<size_t> offset;  // start of buffer k in the fused buffer
  size_t total = 0;            // elements of the fused buffer
  size_t full = 0;             // elements of all buffers (the dense size)
  size_t count(size_t k) const { return (k + 1 < offset.size() ? offset[k + 1] : total) - offset[k]; }
};

// Every buffer dense; sizes[k] elements each.
FusedLayout dense_layout(const std::vector<size_t>& sizes);

// values[k]: buffer k's values; eligible[k]: whether it may be sparse. An eligible buffer keeps
// the positions where masks[k] is non-zero (masks given, same sizes; ErrorKind::bad_input
// otherwise), else where its own value is non-zero.
FusedLayout sparse_layout(const std::vector<std::span<const float>>& values, const std::vector<bool>& eligible,
                          const std::vector<std::span<const float>>* masks = nullptr);

// Host copies between buffer k (count elements of its own, dense) and its part of `fused`.
void pack(const FusedLayout& layout, size_t k, const float* buffer, float* fused);
void unpack(const FusedLayout& layout, size_t k, const float* fused, float* buffer);

}  // namespace hpcnn::dist
