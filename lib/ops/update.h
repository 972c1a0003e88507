// hpcnn ops: the element-wise parts of data-parallel training: packing sparse positions into a
// fused gradient buffer and back, scaling it, and the optimizer updates, all on the tensors'
// device (dist-train's optimizer and gradient exchange take device buffers through these).
//
// gather:  dst[j] = src[positions[j]]      positions: i32 [n] (dist/fused_layout.h); src any f32 tensor (flat view)
// scatter: dst[positions[j]] = src[j]
// scale:   x *= factor
// sgd_update (momentum; PyTorch's formulation), per element of the flat f32 tensors w, g, v:
//   g' = g + wd * w;  v = momentum * v + g';  w -= lr * (nesterov ? g' + momentum * v : v)
// lars_update (You, Gitman & Ginsburg, "Large batch training of convolutional networks", 2017,
// Algorithm 1) over the whole tensor:
//   local = trust * ||w|| / (||g|| + wd * ||w||)  (1 when a norm is 0; norms in double)
//   v = momentum * v + lr * local * (g + wd * w);  w -= v
// Errors: ErrorKind::bad_input when lengths differ or a position is out of range; ErrorKind::usage
// for positions of another dtype than i32.
#pragma once

#include "tensor/tensor.h"

namespace hpcnn::ops {

struct SgdParams {
  float lr = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

void gather(const Tensor& src, const Tensor& positions, Tensor& dst);
void scatter(const Tensor& src, const Tensor& positions, Tensor& dst);
void scale(Tensor& x, float factor);
void sgd_update(Tensor& w, const Tensor& g, Tensor& v, const SgdParams& p);
void lars_update(Tensor& w, const Tensor& g, Tensor& v, const SgdParams& p, float trust_coefficient);

}  // namespace hpcnn::ops
