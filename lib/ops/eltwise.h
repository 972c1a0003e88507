// hpcnn ops: element-wise activations and Dropout, forward and backward, on tensors of any rank.
// y keeps x's shape and layout; backward takes the saved forward input or output as noted and returns gx in gy's
// layout converted to x's.
//   Relu: y = max(x, 0)                      backward from y (gx = gy where y > 0)
//   LeakyRelu: y = x >= 0 ? x : alpha * x     backward from x
//   Sigmoid: y = 1 / (1 + exp(-x))           backward from y: gx = gy * y * (1 - y)
//   Tanh: y = tanh(x)                         backward from y: gx = gy * (1 - y^2)
//   Clip: y = min(max(x, lo), hi)            backward from x: gx = gy where lo <= x <= hi
//     (torch.clamp's convention at the bounds)
//   Dropout (inverted): y = x * mask / (1 - ratio), mask ~ Bernoulli(1 - ratio)
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "tensor/tensor.h"

namespace hpcnn::ops {

enum class Activation { relu, leaky_relu, sigmoid, clip, tanh };

struct ActivationParams {
  Activation kind = Activation::relu;
  float alpha = 0.01f;                                // LeakyRelu
  float lo = -3.402823466e38f, hi = 3.402823466e38f;  // Clip
};

Tensor activation_forward(const Tensor& x, const ActivationParams& p);
// `saved` is y for relu/sigmoid/tanh and x for leaky_relu/clip (activation_saves_output tells which).
Tensor activation_backward(const Tensor& saved, const Tensor& gy, const ActivationParams& p);
bool activation_saves_output(Activation kind);

// Dropout: fills `mask` (0/1 bytes, x's layout order) and returns the scaled output.
Tensor dropout_forward(const Tensor& x, float ratio, std::mt19937_64& rng, std::vector<uint8_t>& mask);
Tensor dropout_backward(const Tensor& gy, float ratio, const std::vector<uint8_t>& mask, Layout x_layout);

}  // namespace hpcnn::ops
