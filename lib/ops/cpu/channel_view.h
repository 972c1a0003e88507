// hpcnn ops (CPU): a tensor seen as [outer, C, inner] along its channel axis 1 (for 4-D nhwc
// tensors: outer = N*H*W, inner = 1), so per-channel kernels serve both layouts.
#pragma once

#include "core/error.h"
#include "tensor/tensor.h"

namespace hpcnn::ops::cpu {

struct ChannelView {
  int64_t outer, C, inner;
  int64_t index(int64_t o, int64_t c, int64_t i) const { return (o * C + c) * inner + i; }
};

inline ChannelView channel_view(const Tensor& t) {
  if (t.rank() < 2)
    throw_error(ErrorKind::bad_input, "per-channel operator needs [N, C, ...], got " + shape_to_string(t.shape()));
  if (t.layout() == Layout::nhwc) return {t.dim(0) * t.dim(2) * t.dim(3), t.dim(1), 1};
  int64_t inner = 1;
  for (int i = 2; i < t.rank(); ++i) inner *= t.dim(i);
  return {t.dim(0), t.dim(1), inner};
}

}  // namespace hpcnn::ops::cpu
