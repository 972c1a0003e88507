#include "train/parameter_memory.h"

namespace hpcnn::train {

nlohmann::json ParameterMemory::to_json() const {
  return {{"weights", weights},     {"gradients", gradients}, {"fused", fused},         {"state", state},
          {"positions", positions}, {"optimizer", optimizer()}, {"total", total()}};
}

ParameterMemory parameter_memory(const std::vector<nn::Parameter>& params, GradientExchange& exchange, Optimizer& optimizer) {
  ParameterMemory m;
  for (const auto& p : params) {
    m.weights += p.value.bytes();
    if (p.grad.defined()) m.gradients += p.grad.bytes();
  }
  m.fused = exchange.fused().bytes();
  m.state = optimizer.state().bytes();
  for (const auto& t : exchange.positions())
    if (t.defined()) m.positions += t.bytes();
  const dist::FusedLayout& l = exchange.layout();
  for (size_t k = 0; k < l.positions.size(); ++k) m.positions += l.positions[k].size() * sizeof(int32_t);  // none once moved
  return m;
}

}  // namespace hpcnn::train
