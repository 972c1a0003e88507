#include "nn/sgd.h"

namespace hpcnn::nn {

void Sgd::step(std::vector<Parameter>& params) {
  if (velocity_.size() != params.size()) {
    velocity_.clear();
    for (auto& p : params) velocity_.push_back(Tensor::zeros(p.value.shape()));
  }
  for (size_t k = 0; k < params.size(); ++k) {
    Parameter& p = params[k];
    float* w = p.value.data();
    const float* g = p.grad.data();
    float* v = velocity_[k].data();
    const float wd = p.no_weight_decay ? 0.0f : opt_.weight_decay;
    const float mu = opt_.momentum, lr = opt_.lr;
    const int64_t n = p.value.numel();
    const bool nesterov = opt_.nesterov;
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i] + wd * w[i];
      v[i] = mu * v[i] + gi;
      w[i] -= lr * (nesterov ? gi + mu * v[i] : v[i]);
    }
  }
}

}  // namespace hpcnn::nn
