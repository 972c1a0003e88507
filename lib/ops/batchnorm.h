// hpcnn ops: batch normalization (Ioffe & Szegedy 2015; ONNX BatchNormalization), forward in
// inference and training mode and backward of the training-mode forward.
//
// x: [N, C, ...] (plain, or 4-D nhwc); scale, bias, mean, var: [C] plain. y has x's shape and
// layout. Training mode normalises with the batch mean and the population (biased) variance
// over every axis but C, as the ONNX specification defines (ReduceVar), and returns them so the
// caller can update running statistics: running = momentum * running + (1 - momentum) * batch.
// (PyTorch updates running_var with the unbiased variance; the ONNX convention is kept here.)
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace hpcnn::ops {

struct BatchNormStats {
  Tensor mean;                      // [C]
  Tensor var;                       // [C], population variance
  Tensor invstd;                    // [C], 1 / sqrt(var + epsilon)
  double count = 0;                 // values per channel: N * spatial size
  std::vector<double> sum, sum_sq;  // [C]: the batch's per-channel sums of x and x^2, in double
  // Frozen statistics: mean/var are constants (the running statistics of an inference-mode
  // forward), so backward's gx = scale * invstd * gy, with no terms through the batch moments.
  bool is_frozen = false;
  static BatchNormStats frozen(const Tensor& mean, const Tensor& var, float epsilon);
};

Tensor batchnorm_inference(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& mean, const Tensor& var,
                           float epsilon);
Tensor batchnorm_training(const Tensor& x, const Tensor& scale, const Tensor& bias, float epsilon, BatchNormStats& stats);
// Gradients of batchnorm_training (or of batchnorm_inference, with BatchNormStats::frozen(running
// statistics)); null pointers are skipped. gscale/gbias are [C].
void batchnorm_backward(const Tensor& x, const Tensor& scale, const BatchNormStats& stats, const Tensor& gy, Tensor* gx,
                        Tensor* gscale, Tensor* gbias);

}  // namespace hpcnn::ops
