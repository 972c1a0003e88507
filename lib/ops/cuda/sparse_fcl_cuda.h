// hpcnn ops: the cuBLAS twin of the structured sparse FCL op (ops/sparse_fcl.h; Matsumura et al.,
// "A novel structured sparse fully connected layer in convolutional neural networks", CCPE 2021,
// doi 10.1002/cpe.6213, which reports its cuBLAS implementation 14.97x faster forward and 16.67x
// backward than the dense layer on VGG-16's fc6; the paper says cuBLAS, not which calls: the GEMMs
// below are our reading). The CPU twin (ops/cpu/sparse_fcl.cpp) is the reference; both follow
//   z[n, k, s] = sum_c A[k, c] * x[n, c, s] + a[k]              (k < r, s < H*W)
//   y[n, o]    = sum_{k, s} B[o, k*HW + s] * z[n, k, s] + b[o]
// on channels-last activations, where the reduction is one GEMM over the N*H*W positions, its
// output is reordered into the FC's input order [N, r*HW] (small), and the FC is one GEMM over the
// N samples that reads B as stored.
//
// Device pointers, fp32, on the handle's stream; no allocation (the caller passes `work`, at
// least sparse_fcl_work_floats(shape) floats). Shapes (row-major):
//   x [N*HW, C] (NHWC), A [r, C], a [r] or null, B [O, r*HW] (the ONNX Gemm weight, transB = 1),
//   b [O] or null; z [N, r*HW] (channel-major, saved for backward); y [N, O].
//   Backward: gy [N, O] -> gx [N*HW, C] (NHWC), gA [r, C], ga [r], gB [O, r*HW], gb [O]; a null
//   output is skipped (the gradient of z lives in `work`).
// Forward: 2 GEMMs (+ the reordering and the bias broadcasts); backward: 4 GEMMs (+ the reordering
// and two column sums). The math mode is the handle's: cuBLAS's default
// (CUBLAS_DEFAULT_MATH) computes fp32 GEMMs in fp32, no TF32 (NVIDIA_TF32_OVERRIDE=1 in the
// environment would change that). Errors: ErrorKind::device from a failing CUDA or cuBLAS call
// (core/cuda_check.h), ErrorKind::usage for non-positive dimensions.
// Only the channel structure runs as this op; sparsify-fcl's spatial structure (a grouped H x W
// convolution) would be one strided-batched GEMM and stays on the graph's Conv.
#pragma once

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

namespace hpcnn::ops::cuda {

struct SparseFclShape {
  int64_t N = 0, C = 0, HW = 0, r = 0, O = 0;
  int64_t features() const { return r * HW; }  // F, the FC's inputs
};

// Floats of scratch the forward and backward need: 2 N F (the reduction's output before its
// reordering; the gradient of z in both orders).
size_t sparse_fcl_work_floats(const SparseFclShape& s);

void sparse_fcl_forward(cublasHandle_t handle, const SparseFclShape& s, const float* x, const float* A, const float* a,
                        const float* B, const float* b, float* z, float* y, float* work);

void sparse_fcl_backward(cublasHandle_t handle, const SparseFclShape& s, const float* x, const float* A, const float* B,
                         const float* z, const float* gy, float* gx, float* gA, float* ga, float* gB, float* gb, float* work);

// Row-major C[M, N] = op(A)[M, K] * op(B)[K, N] (+ beta * C) with cuBLAS's column-major SGEMM
// (computed as C^T = op(B)^T op(A)^T). Leading dimensions are the row-major ones.
void gemm_row_major(cublasHandle_t handle, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace hpcnn::ops::cuda
