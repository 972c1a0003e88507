#include "dist/exchange.h"

#include <cstring>

#include "core/error.h"

namespace hpcnn::dist {

namespace {
void finish(ParamLayout& l, const std::vector<nn::Parameter>& params) {
  l.offset.clear();
  l.total = l.full = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    l.offset.push_back(l.total);
    l.total += l.dense[k] ? static_cast<size_t>(params[k].value.numel()) : l.positions[k].size();
    l.full += static_cast<size_t>(params[k].value.numel());
  }
}
}  // namespace

ParamLayout dense_layout(const std::vector<nn::Parameter>& params) {
  ParamLayout l;
  l.positions.resize(params.size());
  l.dense.assign(params.size(), true);
  finish(l, params);
  return l;
}

ParamLayout sparse_layout(std::vector<nn::Parameter>& params, const std::vector<Tensor>* masks) {
  if (masks && masks->size() != params.size())
    throw_error(ErrorKind::bad_input, "the mask has " + std::to_string(masks->size()) + " tensors for " +
                                          std::to_string(params.size()) + " parameters");
  ParamLayout l;
  l.positions.resize(params.size());
  l.dense.assign(params.size(), true);
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor& w = params[k].value;
    if (w.rank() < 2) continue;
    const float* m = w.data();
    if (masks) {
      if ((*masks)[k].shape() != w.shape())
        throw_error(ErrorKind::bad_input, "mask of '" + params[k].name + "' has shape " + shape_to_string((*masks)[k].shape()) +
                                              ", the weight " + shape_to_string(w.shape()));
      m = (*masks)[k].data();
    }
    l.dense[k] = false;
    auto& pos = l.positions[k];
    for (int64_t i = 0; i < w.numel(); ++i) {
      if (m[i] != 0.0f) pos.push_back(i);
      else w.data()[i] = 0.0f;
    }
  }
  finish(l, params);
  return l;
}

void pack(const ParamLayout& l, size_t k, const Tensor& src, float* dst) {
  float* d = dst + l.offset[k];
  if (l.dense[k]) {
    std::memcpy(d, src.data(), src.bytes());
    return;
  }
  const auto& pos = l.positions[k];
  const float* s = src.data();
  for (size_t j = 0; j < pos.size(); ++j) d[j] = s[pos[j]];
}

void unpack(const ParamLayout& l, size_t k, const float* src, Tensor& dst) {
  const float* s = src + l.offset[k];
  if (l.dense[k]) {
    std::memcpy(dst.data(), s, dst.bytes());
    return;
  }
  const auto& pos = l.positions[k];
  float* d = dst.data();
  for (size_t j = 0; j < pos.size(); ++j) d[pos[j]] = s[j];
}

GradientExchange::GradientExchange(Communicator& comm, ParamLayout layout)
    : comm_(comm), layout_(std::move(layout)), fused_(layout_.total) {}

void GradientExchange::exchange(const std::vector<nn::Parameter>& params, int local_steps) {
  if (params.size() != layout_.dense.size()) throw_error(ErrorKind::usage, "gradient exchange: parameter count changed");
  for (size_t k = 0; k < params.size(); ++k) pack(layout_, k, params[k].grad, fused_.data());
  comm_.allreduce_sum(fused_.data(), fused_.size());
  const float scale = 1.0f / static_cast<float>(comm_.size() * std::max(1, local_steps));
  for (float& v : fused_) v *= scale;
}

}  // namespace hpcnn::dist
