// hpcnn train: the optimizers of dist-train (the one SGD of the project, and LARS), updating
// parameters from the averaged, compacted gradients of train::GradientExchange. State
// (momentum) exists only for the positions in the layout, so a pruned model's zero weights get
// no state and stay exactly zero. The updates run as the ops kernels of the parameters' device
// (ops/update.h), on device buffers: the fused gradients and the velocity are tensors there.
//
//   sgd:  g' = g + wd * w;  v = momentum * v + g';  w -= lr * (nesterov ? g' + momentum * v : v)
//   lars: (You, Gitman & Ginsburg, "Large batch training of convolutional networks", 2017)
//         per parameter tensor: local = trust * ||w|| / (||g|| + wd * ||w||) (1 when a norm is 0);
//         v = momentum * v + lr * local * (g + wd * w);  w -= v.
//         Tensors without weight decay (BatchNormalization, biases) skip the LARS scaling.
// Weight decay skips Parameter::no_weight_decay tensors when skip_bn_bias (the default).
#pragma once

#include <string>
#include <vector>

#include "dist/fused_layout.h"
#include "nn/model.h"

namespace hpcnn::train {

struct OptimizerOptions {
  std::string type = "sgd";  // "sgd" or "lars"
  float momentum = 0.9f;
  bool nesterov = false;
  float weight_decay = 0.0f;
  bool weight_decay_skip_bn_bias = true;
  float trust_coefficient = 0.001f;  // LARS
};

class Optimizer {
 public:
  // `positions`: the layout's sparse positions as i64 tensors on `device` (GradientExchange::positions()).
  Optimizer(OptimizerOptions options, const dist::FusedLayout& layout, std::vector<Tensor> positions,
            const Device& device = Device::cpu());
  // grads: the fused compacted gradients (layout order, on the device). Updates params[k].value in place.
  void step(std::vector<nn::Parameter>& params, const Tensor& grads, float lr);
  Tensor& state() { return velocity_; }  // for checkpoints (layout order, on the device)

 private:
  OptimizerOptions opt_;
  const dist::FusedLayout& layout_;
  std::vector<Tensor> positions_;
  Tensor velocity_;
};

}  // namespace hpcnn::train
