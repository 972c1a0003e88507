#include "train/optimizer.h"

#include "core/error.h"
#include "ops/update.h"

namespace hpcnn::train {

Optimizer::Optimizer(OptimizerOptions options, const dist::FusedLayout& layout, std::vector<Tensor> positions,
                     const Device& device)
    : opt_(std::move(options)),
      layout_(layout),
      positions_(std::move(positions)),
      velocity_({static_cast<int64_t>(layout.total)}, Layout::plain, DType::f32, device) {
  if (opt_.type != "sgd" && opt_.type != "lars")
    throw_error(ErrorKind::usage, "optimizer.type '" + opt_.type + "' is not one of: sgd, lars");
  if (positions_.size() != layout_.dense.size())
    throw_error(ErrorKind::usage, "optimizer: " + std::to_string(positions_.size()) + " position tensors for " +
                                      std::to_string(layout_.dense.size()) + " buffers");
  copy_into(Tensor::zeros({velocity_.numel()}), velocity_);  // the velocity starts at zero
}

void Optimizer::step(std::vector<nn::Parameter>& params, const Tensor& grads, float lr) {
  for (size_t k = 0; k < params.size(); ++k) {
    nn::Parameter& p = params[k];
    const int64_t off = static_cast<int64_t>(layout_.offset[k]), n = static_cast<int64_t>(layout_.count(k));
    const Tensor g = grads.slice(off, n);
    Tensor v = velocity_.slice(off, n);
    Tensor w = p.value.reshaped({p.value.numel()});  // the trained positions of w: in place, or compacted
    Tensor wc = w;
    if (!layout_.dense[k]) {
      wc = Tensor({n}, Layout::plain, DType::f32, w.device());
      ops::gather(w, positions_[k], wc);
    }
    const bool decay = !(opt_.weight_decay_skip_bn_bias && p.no_weight_decay);
    const ops::SgdParams sp{lr, opt_.momentum, decay ? opt_.weight_decay : 0.0f, opt_.nesterov};
    if (opt_.type == "lars" && decay)
      ops::lars_update(wc, g, v, sp, opt_.trust_coefficient);
    else
      ops::sgd_update(wc, g, v, sp);
    if (!layout_.dense[k]) ops::scatter(wc, positions_[k], w);
  }
}

}  // namespace hpcnn::train
