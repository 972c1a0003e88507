#include "train/optimizer.h"

#include <cmath>

#include "core/error.h"

namespace hpcnn::train {

Optimizer::Optimizer(OptimizerOptions options, const dist::FusedLayout& layout)
    : opt_(std::move(options)), layout_(layout), velocity_(layout.total, 0.0f) {
  if (opt_.type != "sgd" && opt_.type != "lars")
    throw_error(ErrorKind::usage, "optimizer.type '" + opt_.type + "' is not one of: sgd, lars");
}

void Optimizer::step(std::vector<nn::Parameter>& params, const std::vector<float>& grads, float lr) {
  for (size_t k = 0; k < params.size(); ++k) {
    nn::Parameter& p = params[k];
    const size_t off = layout_.offset[k];
    const size_t n = (k + 1 < params.size() ? layout_.offset[k + 1] : layout_.total) - off;
    // Gather the trained positions of w (dense tensors are used in place).
    float* w;
    if (layout_.dense[k]) {
      w = p.value.data();
    } else {
      w_.resize(n);
      const auto& pos = layout_.positions[k];
      for (size_t j = 0; j < n; ++j) w_[j] = p.value.data()[pos[j]];
      w = w_.data();
    }
    const float* g = grads.data() + off;
    float* v = velocity_.data() + off;
    const bool decay = !(opt_.weight_decay_skip_bn_bias && p.no_weight_decay);
    const float wd = decay ? opt_.weight_decay : 0.0f;
    const float mu = opt_.momentum;
    if (opt_.type == "lars" && decay) {
      double wn = 0, gn = 0;
      for (size_t j = 0; j < n; ++j) {
        wn += static_cast<double>(w[j]) * w[j];
        gn += static_cast<double>(g[j]) * g[j];
      }
      wn = std::sqrt(wn);
      gn = std::sqrt(gn);
      const double local = (wn > 0 && gn > 0) ? opt_.trust_coefficient * wn / (gn + wd * wn) : 1.0;
      const float s = static_cast<float>(lr * local);
      for (size_t j = 0; j < n; ++j) {
        v[j] = mu * v[j] + s * (g[j] + wd * w[j]);
        w[j] -= v[j];
      }
    } else {
      for (size_t j = 0; j < n; ++j) {
        const float gj = g[j] + wd * w[j];
        v[j] = mu * v[j] + gj;
        w[j] -= lr * (opt_.nesterov ? gj + mu * v[j] : v[j]);
      }
    }
    if (!layout_.dense[k]) {
      const auto& pos = layout_.positions[k];
      for (size_t j = 0; j < n; ++j) p.value.data()[pos[j]] = w_[j];
    }
  }
}

}  // namespace hpcnn::train
