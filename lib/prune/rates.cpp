#include "prune/rates.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "core/error.h"

namespace hpcnn::prune {

std::vector<double> default_rate_grid() {
  std::vector<double> g;
  for (int i = 0; i < 10; ++i) g.push_back(i / 10.0);
  return g;
}

std::vector<double> data_rate_grid() { return {0.0, 0.1, 0.2, 0.3, 0.4, 0.5}; }

void validate_rate_grid(const std::vector<double>& grid) {
  if (grid.empty()) throw_error(ErrorKind::usage, "the rate grid is empty");
  for (size_t i = 0; i < grid.size(); ++i) {
    if (!std::isfinite(grid[i]) || grid[i] < 0 || grid[i] >= 1)
      throw_error(ErrorKind::usage, "rate " + std::to_string(grid[i]) + " is outside [0, 1)");
    if (i && grid[i] <= grid[i - 1]) throw_error(ErrorKind::usage, "rates must be strictly ascending");
  }
}

int64_t removed_count(double rate, int64_t classes) {
  return static_cast<int64_t>(std::floor(rate * static_cast<double>(classes) + 0.5));
}

std::vector<int> removal_order(const Group& g) {
  std::vector<int> order(g.classes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return g.score[a] < g.score[b]; });
  return order;
}

double pruning_error(const Group& g, const std::vector<int>& order, int64_t k) {
  double s = 0;
  for (int64_t i = 0; i < k; ++i) s += g.score[order[i]];
  return g.weight_numel > 0 ? s / static_cast<double>(g.weight_numel) : 0.0;
}

GroupDecision derive_rate(const Group& g, double threshold, const std::vector<double>& grid) {
  GroupDecision d;
  d.threshold = threshold;
  if (!g.fixed_reason.empty()) return d;
  const auto order = removal_order(g);
  const int64_t c = static_cast<int64_t>(g.classes.size());
  for (double r : grid) {
    const int64_t k = removed_count(r, c);
    if (k >= c) break;  // keep at least one channel
    const double e = pruning_error(g, order, k);
    if (e <= threshold) {
      d.rate = r;
      d.removed = k;
      d.error = e;
    } else {
      break;  // the error only grows with the rate
    }
  }
  return d;
}

GroupDecision uniform_rate(const Group& g, double rate) {
  GroupDecision d;
  if (!g.fixed_reason.empty() || g.classes.empty()) return d;
  const int64_t c = static_cast<int64_t>(g.classes.size());
  d.removed = std::min(removed_count(rate, c), c - 1);
  d.rate = rate;
  d.error = pruning_error(g, removal_order(g), d.removed);
  return d;
}

std::vector<char> kept_classes(const ChannelGraph& cg, const std::vector<GroupDecision>& decisions) {
  std::vector<char> kept(static_cast<size_t>(cg.id_count()), 1);
  for (size_t gi = 0; gi < cg.groups.size(); ++gi) {
    const Group& g = cg.groups[gi];
    if (decisions[gi].removed == 0) continue;
    const auto order = removal_order(g);
    for (int64_t i = 0; i < decisions[gi].removed; ++i) kept[g.classes[order[i]]] = 0;
  }
  return kept;
}

Costs count_costs(const onnxu::GraphView& view, const onnxu::ShapeMap& shapes, const ChannelGraph& cg,
                  const std::vector<char>& kept) {
  // Fraction of each constant's elements that remain.
  std::unordered_map<std::string, double> factor;
  for (const auto& s : cg.slices) {
    int64_t k = 0;
    for (int id : s.ids) k += kept[cg.root(id)];
    double& f = factor.emplace(s.value, 1.0).first->second;
    if (!s.ids.empty()) f *= static_cast<double>(k) / static_cast<double>(s.ids.size());
  }
  return onnxu::count_costs(view, shapes, [&](const std::string& name, const onnxu::Dims& dims) {
    auto it = factor.find(name);
    const double n = static_cast<double>(onnxu::numel(dims));
    return static_cast<int64_t>(std::llround(it == factor.end() ? n : n * it->second));
  });
}

}  // namespace hpcnn::prune
