// hpcnn ops (internal): the CPU twin of every op contract, with the contracts' own signatures
// (see the op headers for shapes, layouts and errors). cpu/kernels.cpp registers them as the
// CPU's table of ops/kernels.h, the reference every other device is tested against.
#pragma once

#include <memory>
#include <random>
#include <span>
#include <vector>

#include "ops/kernels.h"

namespace hpcnn::ops::cpu {

std::unique_ptr<ConvKernel> make_conv2d(const Conv2dParams& p);
std::unique_ptr<ConvKernel> make_conv3d(const Conv3dParams& p);

Tensor batchnorm_inference(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& mean, const Tensor& var,
                           float epsilon);
Tensor batchnorm_training(const Tensor& x, const Tensor& scale, const Tensor& bias, float epsilon, BatchNormStats& stats);
void batchnorm_backward(const Tensor& x, const Tensor& scale, const BatchNormStats& stats, const Tensor& gy, Tensor* gx,
                        Tensor* gscale, Tensor* gbias);

Tensor activation_forward(const Tensor& x, const ActivationParams& p);
Tensor activation_backward(const Tensor& saved, const Tensor& gy, const ActivationParams& p);
Tensor dropout_forward(const Tensor& x, float ratio, std::mt19937_64& rng, std::vector<uint8_t>& mask);
Tensor dropout_backward(const Tensor& gy, float ratio, const std::vector<uint8_t>& mask, Layout x_layout);

Tensor gemm_forward(const Tensor& A, const Tensor& B, const Tensor& C, const GemmParams& p);
void gemm_backward(const Tensor& A, const Tensor& B, const Tensor& C, const GemmParams& p, const Tensor& gy, Tensor* gA,
                   Tensor* gB, Tensor* gC);
Tensor matmul_forward(const Tensor& A, const Tensor& B);
void matmul_backward(const Tensor& A, const Tensor& B, const Tensor& gy, Tensor* gA, Tensor* gB);

Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b);
void binary_backward(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& gy, Tensor* ga, Tensor* gb);
void add_sub_backward(BinaryOp op, const Shape& a, Layout la, const Shape& b, Layout lb, const Tensor& gy, Tensor* ga,
                      Tensor* gb);
Tensor reduce_to_shape(const Tensor& g, const Shape& to);

Tensor maxpool_forward(const Tensor& x, const Pool2dParams& p, MaxPoolSaved* saved);

Tensor sparse_fcl_forward(const Tensor& x, const Tensor& A, const Tensor& a, const Tensor& B, const Tensor& b,
                          SparseFclSaved* saved);
void sparse_fcl_backward(const Tensor& x, const Tensor& A, const Tensor& B, const SparseFclSaved& saved, const Tensor& gy,
                         Tensor* gx, Tensor* gA, Tensor* ga, Tensor* gB, Tensor* gb);
Tensor maxpool_backward(const Shape& x_shape, const MaxPoolSaved& saved, const Tensor& gy);
Tensor avgpool_forward(const Tensor& x, const Pool2dParams& p);
Tensor avgpool_backward(const Shape& x_shape, const Pool2dParams& p, const Tensor& gy);
Tensor maxpool3d_forward(const Tensor& x, const Pool3dParams& p, MaxPoolSaved* saved);
Tensor maxpool3d_backward(const Shape& x_shape, const MaxPoolSaved& saved, const Tensor& gy);
Tensor avgpool3d_forward(const Tensor& x, const Pool3dParams& p);
Tensor avgpool3d_backward(const Shape& x_shape, const Pool3dParams& p, const Tensor& gy);
Tensor global_avgpool_forward(const Tensor& x);
Tensor global_avgpool_backward(const Tensor& x_like, const Tensor& gy);

Tensor concat_forward(const std::vector<Tensor>& xs, int64_t axis);
std::vector<Tensor> concat_backward(const std::vector<Shape>& shapes, int64_t axis, const Tensor& gy);
Tensor softmax_forward(const Tensor& x, int64_t axis, bool legacy_2d);
Tensor softmax_backward(const Tensor& y, const Tensor& gy, int64_t axis, bool legacy_2d);
Tensor transpose_forward(const Tensor& x, const std::vector<int64_t>& perm);
Tensor pad_forward(const Tensor& x, const std::vector<int64_t>& pads, float value);
Tensor pad_backward(const Shape& x_shape, const std::vector<int64_t>& pads, const Tensor& gy);

LossResult softmax_cross_entropy(const Tensor& logits, std::span<const int32_t> labels, float label_smoothing, Tensor* grad);

void gather(const Tensor& src, const Tensor& positions, Tensor& dst);
void scatter(const Tensor& src, const Tensor& positions, Tensor& dst);
void scale(Tensor& x, float factor);
void sgd_update(Tensor& w, const Tensor& g, Tensor& v, const SgdParams& p);
void lars_update(Tensor& w, const Tensor& g, Tensor& v, const SgdParams& p, float trust_coefficient);

}  // namespace hpcnn::ops::cpu
