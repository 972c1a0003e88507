// hpcnn nn: stochastic gradient descent with momentum (PyTorch's formulation):
//   g = grad + weight_decay * w   (weight decay skipped for Parameter::no_weight_decay)
//   v = momentum * v + g ;  w -= lr * (nesterov ? g + momentum * v : v)
// One velocity tensor per parameter, created on first use.
#pragma once

#include <vector>

#include "nn/model.h"

namespace hpcnn::nn {

struct SgdOptions {
  float lr = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

class Sgd {
 public:
  explicit Sgd(SgdOptions options) : opt_(options) {}
  void step(std::vector<Parameter>& params);
  void set_lr(float lr) { opt_.lr = lr; }

 private:
  SgdOptions opt_;
  std::vector<Tensor> velocity_;
};

}  // namespace hpcnn::nn
