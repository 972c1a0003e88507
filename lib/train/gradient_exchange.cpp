#include "train/gradient_exchange.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <span>

#include "core/error.h"
#include "ops/update.h"

namespace hpcnn::train {

dist::FusedLayout parameter_layout(std::vector<nn::Parameter>& params, bool sparse, const std::vector<Tensor>* masks,
                                   const std::vector<bool>* eligible_override) {
  std::vector<size_t> sizes;
  for (const auto& p : params) sizes.push_back(static_cast<size_t>(p.value.numel()));
  if (!sparse && !masks) return dist::dense_layout(sizes);
  if (masks && masks->size() != params.size())
    throw_error(ErrorKind::bad_input, "the mask has " + std::to_string(masks->size()) + " tensors for " +
                                          std::to_string(params.size()) + " parameters");
  std::vector<std::span<const float>> values, mask_spans;
  std::vector<bool> eligible;
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor& w = params[k].value;
    values.emplace_back(w.data(), static_cast<size_t>(w.numel()));
    eligible.push_back(eligible_override && k < eligible_override->size() ? (*eligible_override)[k] : w.rank() >= 2);
    if (masks) {
      const Tensor& m = (*masks)[k];
      if (m.shape() != w.shape())
        throw_error(ErrorKind::bad_input, "mask of '" + params[k].name + "' has shape " + shape_to_string(m.shape()) +
                                              ", the weight " + shape_to_string(w.shape()));
      mask_spans.emplace_back(m.data(), static_cast<size_t>(m.numel()));
    }
  }
  dist::FusedLayout l = dist::sparse_layout(values, eligible, masks ? &mask_spans : nullptr);
  if (masks)  // masked-out weights start at zero and stay there
    for (size_t k = 0; k < params.size(); ++k)
      if (!l.dense[k]) {
        const float* m = (*masks)[k].data();
        float* w = params[k].value.data();
        for (int64_t i = 0; i < params[k].value.numel(); ++i)
          if (m[i] == 0.0f) w[i] = 0.0f;
      }
  return l;
}

std::vector<Tensor> position_tensors(const dist::FusedLayout& layout, const Device& device) {
  std::vector<Tensor> out(layout.dense.size());
  for (size_t k = 0; k < layout.dense.size(); ++k) {
    if (layout.dense[k]) continue;
    const auto& pos = layout.positions[k];
    Tensor host({static_cast<int64_t>(pos.size())}, Layout::plain, DType::i32);
    std::copy(pos.begin(), pos.end(), host.data_as<int32_t>());
    out[k] = host.to(device);
  }
  return out;
}

GradientExchange::GradientExchange(dist::Communicator& comm, dist::FusedLayout layout, const Device& device,
                                   const std::string& algorithm)
    : comm_(comm),
      layout_(std::move(layout)),
      algorithm_(dist::choose_sum_algorithm(algorithm, comm)),
      positions_(position_tensors(layout_, device)),
      fused_({static_cast<int64_t>(layout_.total)}, Layout::plain, DType::f32, device),
      replicated_from_(layout_.total) {
  for (auto& pos : layout_.positions) std::vector<int32_t>().swap(pos);  // positions_ holds them now
  // auto on several nodes of several ranks: timed on this buffer (host memory only: a device
  // buffer keeps the rule's choice).
  if (device.is_cpu()) algorithm_ = dist::choose_sum_algorithm_measured(algorithm, comm_, fused_.data(), layout_.total);
  if (comm_.rank() != 0) return;
  if (algorithm_.warning)
    spdlog::warn("exchange.algorithm {}: {}; using the flat allreduce", algorithm, algorithm_.reason);
  else
    spdlog::info("gradient allreduce: {} ({})", dist::to_string(algorithm_.algorithm), algorithm_.reason);
}

void GradientExchange::exchange(const std::vector<nn::Parameter>& params, int local_steps) {
  if (params.size() != layout_.dense.size()) throw_error(ErrorKind::usage, "gradient exchange: parameter count changed");
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor part = fused_.slice(static_cast<int64_t>(layout_.offset[k]), static_cast<int64_t>(layout_.count(k)));
    const Tensor grad = params[k].grad.reshaped({params[k].grad.numel()});
    if (layout_.dense[k])
      copy_into(grad, part);
    else
      ops::gather(grad, positions_[k], part);
  }
  // The values before replicated_from_ (all of them unless set_replicated_suffix) over all ranks,
  // the replicated suffix over the replicas.
  const int steps = std::max(1, local_steps);
  const auto head = static_cast<int64_t>(replicated_from_), tail = static_cast<int64_t>(layout_.total) - head;
  if (head > 0) {
    dist::allreduce_sum(comm_, fused_.data(), static_cast<size_t>(head), algorithm_.algorithm);
    Tensor part = fused_.slice(0, head);
    ops::scale(part, 1.0f / static_cast<float>(comm_.size() * steps));
  }
  if (tail > 0) {
    if (replicas_) replicas_->allreduce_sum(fused_.data() + head, static_cast<size_t>(tail));
    Tensor part = fused_.slice(head, tail);
    ops::scale(part, 1.0f / static_cast<float>((replicas_ ? replicas_->size() : 1) * steps));
  }
}

void GradientExchange::set_replicated_suffix(size_t from, dist::Communicator* replicas) {
  if (from > layout_.total)
    throw_error(ErrorKind::usage, "gradient exchange: a replicated suffix from value " + std::to_string(from) + " of a buffer of " +
                                      std::to_string(layout_.total));
  replicated_from_ = from;
  replicas_ = replicas;
}

}  // namespace hpcnn::train
