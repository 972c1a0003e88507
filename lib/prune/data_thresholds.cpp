#include "prune/data_thresholds.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hpcnn::prune {
namespace {

constexpr double kNone = 1e6;  // the authors' "no such rate" value of Einc/Edec

bool finite_nonnegative(double v) { return std::isfinite(v) && v >= 0; }

// E_g at the largest grid rate that keeps a class.
double error_at_largest_rate(const Group& g, const std::vector<double>& grid) {
  const int64_t c = static_cast<int64_t>(g.classes.size());
  if (c < 2) return 0;
  const int64_t k = std::min(removed_count(grid.back(), c), c - 1);
  return pruning_error(g, removal_order(g), k);
}

}  // namespace

DataThresholds data_thresholds(const ChannelGraph& cg, const DataThresholdInputs& in, const std::vector<double>& grid) {
  if (!finite_nonnegative(in.loss_before) || !finite_nonnegative(in.loss))
    throw_error(ErrorKind::usage, "the losses must be finite numbers >= 0");
  if (!finite_nonnegative(in.margin)) throw_error(ErrorKind::usage, "the loss margin must be a finite number >= 0");
  if (in.upper_bound && !(std::isfinite(*in.upper_bound) && *in.upper_bound > 0))
    throw_error(ErrorKind::usage, "the upper bound U must be a finite number > 0");
  const double loss_diff = in.loss_before * (1.0 + in.margin) - in.loss;
  DataThresholds t;
  t.raw.resize(cg.groups.size());
  t.group_sensitivity.assign(cg.groups.size(), 0.0);
  double max_th = 0, max_e = 0, sq = 0;
  size_t prunable = 0;
  for (size_t gi = 0; gi < cg.groups.size(); ++gi) {
    const Group& g = cg.groups[gi];
    if (!g.fixed_reason.empty()) continue;
    double s = 0;
    int64_t n = 0;
    for (int li : g.layers) {
      const Layer& L = cg.layers[li];
      auto it = in.sensitivity.find(L.weight.name);
      if (it == in.sensitivity.end())
        throw_error(ErrorKind::bad_input,
                    "no connection sensitivity for weight '" + L.weight.name + "' of layer '" + L.name + "'");
      s += it->second;
      n += L.weight_numel;
    }
    const double th = n > 0 ? loss_diff * s / static_cast<double>(n) : 0.0;
    t.raw[gi] = th;
    t.group_sensitivity[gi] = s;
    max_th = prunable == 0 ? th : std::max(max_th, th);
    max_e = std::max(max_e, error_at_largest_rate(g, grid));
    sq += th * th;
    ++prunable;
  }
  t.raw_norm = std::sqrt(sq);
  t.limit = std::sqrt(static_cast<double>(prunable)) * std::max(max_th, max_e);
  t.bound = in.upper_bound ? *in.upper_bound : t.limit;
  const double scale = t.raw_norm > t.bound && t.raw_norm > 0 ? t.bound / t.raw_norm : 1.0;
  t.scaled.resize(cg.groups.size());
  for (size_t gi = 0; gi < cg.groups.size(); ++gi)
    if (t.raw[gi]) t.scaled[gi] = *t.raw[gi] * scale;
  return t;
}

NextBound next_upper_bound(const ChannelGraph& cg, const DataThresholds& th, const std::vector<GroupDecision>& decisions,
                           const std::vector<double>& grid) {
  double min_q_inc = INFINITY, max_q_dec = -INFINITY;
  for (size_t gi = 0; gi < cg.groups.size(); ++gi) {
    if (!th.scaled[gi]) continue;
    const Group& g = cg.groups[gi];
    const double t = *th.scaled[gi];
    const GroupDecision& d = decisions[gi];
    double inc = 0, dec = 0;
    if (d.removed > 0) {
      const int64_t c = static_cast<int64_t>(g.classes.size());
      const auto order = removal_order(g);
      inc = kNone;
      for (double r : grid) {
        const int64_t k = removed_count(r, c);
        if (r <= d.rate || k <= d.removed || k >= c) continue;
        inc = std::min(inc, std::max(0.0, pruning_error(g, order, k) - t));
      }
      dec = t - d.error > 0 ? t - d.error : kNone;
    }
    const double q_inc = t > 0 ? 1.0 + inc / t : 1.0;
    const double q_dec = t > 0 ? 1.0 - dec / t : 1.0;
    min_q_inc = std::min(min_q_inc, q_inc);
    max_q_dec = std::max(max_q_dec, q_dec);
  }
  NextBound nb;
  if (!std::isfinite(min_q_inc)) min_q_inc = 1.0, max_q_dec = 1.0;  // no prunable group
  nb.accepted = std::min(th.bound * std::max(2.0, min_q_inc), th.limit);
  nb.rejected = std::min(th.bound * std::min(0.5, max_q_dec), th.limit);
  return nb;
}

}  // namespace hpcnn::prune
