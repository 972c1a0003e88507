// hpcnn prune: pruning error, automatic rate derivation and model cost counting.
//
// Method: Sakai et al., "Automatic pruning rate derivation for structured pruning of deep
// neural networks", ICPR 2022. For a group with C channel classes and a grid rate r, the
// k = floor(r*C + 0.5) classes with the smallest L1 scores (sum of the members' filter L1 norms)
// are removed; the pruning error is the sum of the removed scores divided by the number of
// weight elements of the group's members. The derived rate is the largest grid rate whose
// error is <= the threshold and that keeps at least one class.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "onnx/costs.h"
#include "prune/channel_graph.h"

namespace hpcnn::prune {

// Default grid: 0.0, 0.1, ..., 0.9.
std::vector<double> default_rate_grid();
// Default grid of data-driven thresholds: 0.0, 0.1, ..., 0.5, the authors' (FujitsuResearch/
// automatic_pruning examples); rates apply to the current widths, so they compound over the loop.
std::vector<double> data_rate_grid();
// Checks a grid: non-empty, every rate in [0, 1), strictly ascending. ErrorKind::usage.
void validate_rate_grid(const std::vector<double>& grid);

int64_t removed_count(double rate, int64_t classes);

struct GroupDecision {
  double rate = 0;      // derived grid rate (0 for fixed groups)
  int64_t removed = 0;  // classes removed
  double error = 0;     // pruning error at `rate`
  std::optional<double> threshold;
};

// Class order for removal: ascending score, ties by class position.
std::vector<int> removal_order(const Group& g);
// Pruning error when the k smallest classes are removed.
double pruning_error(const Group& g, const std::vector<int>& order, int64_t k);
GroupDecision derive_rate(const Group& g, double threshold, const std::vector<double>& grid);
// The uniform-rate baseline (prune-rate --rate): removes the k = removed_count(rate, C) classes
// with the smallest L1 scores, at most C - 1 (one class is always kept); fixed groups keep all.
// `threshold` stays empty: no threshold decided it. rate in [0, 1).
GroupDecision uniform_rate(const Group& g, double rate);

// kept[root id] for every channel id's class, from per-group decisions.
std::vector<char> kept_classes(const ChannelGraph& cg, const std::vector<GroupDecision>& decisions);

using Costs = onnxu::Costs;

// Costs of the model after applying `kept` (all ones: the original model).
Costs count_costs(const onnxu::GraphView& view, const onnxu::ShapeMap& shapes, const ChannelGraph& cg,
                  const std::vector<char>& kept);

}  // namespace hpcnn::prune
