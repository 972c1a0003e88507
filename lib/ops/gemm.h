// hpcnn ops: ONNX Gemm and MatMul, forward and backward, through oneDNN's sgemm.
//   Gemm: Y = alpha * A' * B' + beta * C, A' = transA ? A^T : A ([M, K]), B' = transB ? B^T : B
//         ([K, N]), C unidirectionally broadcast to [M, N] (or undefined).
//   MatMul: numpy.matmul semantics: 1-D operands promoted and the added dim removed, batch
//         dims broadcast. Inputs plain (4-D nhwc inputs are converted).
#pragma once

#include "tensor/tensor.h"

namespace hpcnn::ops {

struct GemmParams {
  float alpha = 1.0f, beta = 1.0f;
  bool trans_a = false, trans_b = false;
};

Tensor gemm_forward(const Tensor& A, const Tensor& B, const Tensor& C, const GemmParams& p);
void gemm_backward(const Tensor& A, const Tensor& B, const Tensor& C, const GemmParams& p, const Tensor& gy, Tensor* gA,
                   Tensor* gB, Tensor* gC);

Tensor matmul_forward(const Tensor& A, const Tensor& B);
void matmul_backward(const Tensor& A, const Tensor& B, const Tensor& gy, Tensor* gA, Tensor* gB);

}  // namespace hpcnn::ops
