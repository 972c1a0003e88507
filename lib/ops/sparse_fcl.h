// hpcnn ops: the structured sparse first FC layer (Matsumura et al., "A novel structured sparse
// fully connected layer in convolutional neural networks", CCPE 2021, doi 10.1002/cpe.6213; the
// shape is our reading of the paper, see tools/sparsify-fcl/README.md): a 1x1 channel reduction shared
// over the positions, then a dense layer over the reduced features, as one op:
//   z[n, k, s] = sum_c A[k, c] * x[n, c, s] + a[k]              (k < r, s < H*W)
//   y[n, o]    = sum_{k, s} B[o, k*HW + s] * z[n, k, s] + b[o]   (ONNX Flatten order: channel-major)
// x: [N, C, H, W] fp32 (plain or nhwc); A: [r, C] or [r, C, 1, 1] (the 1x1 Conv weight); a: [r] or
// undefined; B: [O, r*H*W] (the Gemm weight with transB = 1); b: [O] or undefined. y: [N, O] plain.
// With channels-last activations the reduction is one GEMM over the N*H*W positions; its output
// (N*H*W*r values, small) is transposed into the FC's input order [N, r*H*W], and the FC is one GEMM
// over the N samples that reads B as stored (backward likewise: gB comes out in B's layout).
// saved (for backward): z as [N, r*H*W], channel-major (ONNX Flatten order).
// Backward: gx (x's shape, nhwc), gA (A's shape), ga [r], gB [O, r*HW], gb [O]; null pointers are
// skipped. Errors: ErrorKind::bad_input for inconsistent shapes (naming both).
#pragma once

#include "tensor/tensor.h"

namespace hpcnn::ops {

struct SparseFclSaved {
  Tensor z;  // [N*H*W, r]
};

Tensor sparse_fcl_forward(const Tensor& x, const Tensor& A, const Tensor& a, const Tensor& B, const Tensor& b,
                          SparseFclSaved* saved);
void sparse_fcl_backward(const Tensor& x, const Tensor& A, const Tensor& B, const SparseFclSaved& saved, const Tensor& gy,
                         Tensor* gx, Tensor* gA, Tensor* ga, Tensor* gB, Tensor* gb);

}  // namespace hpcnn::ops
