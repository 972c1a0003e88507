#include "prune/prune_rate.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"
#include "onnx/graph.h"
#include "onnx/shapes.h"
#include "prune/channel_graph.h"
#include "prune/masking.h"
#include "prune/rates.h"
#include "prune/surgery.h"
#include "prune/verify.h"

namespace hpcnn::prune {
namespace {

using json = nlohmann::ordered_json;

double reduction(int64_t before, int64_t after) {
  return before > 0 ? 1.0 - static_cast<double>(after) / static_cast<double>(before) : 0.0;
}

// One threshold per group: the smallest of its members' thresholds (a group shares one
// kept-channel set, so the strictest member decides). nullopt: keep the group whole.
std::optional<double> group_threshold(const ChannelGraph& cg, const Group& g, const PruneOptions& o) {
  std::optional<double> t;
  for (int li : g.layers) {
    auto it = o.layer_thresholds.find(cg.layers[li].name);
    std::optional<double> lt = it != o.layer_thresholds.end() ? std::optional<double>(it->second) : o.threshold;
    if (!lt) return std::nullopt;
    t = t ? std::min(*t, *lt) : *lt;
  }
  return t;
}

std::vector<GroupDecision> decide(const ChannelGraph& cg, const std::vector<double>& grid,
                                  const std::function<std::optional<double>(const Group&)>& threshold_of) {
  std::vector<GroupDecision> d;
  for (const auto& g : cg.groups) {
    auto t = threshold_of(g);
    if (t) {
      d.push_back(derive_rate(g, *t, grid));
    } else {
      d.emplace_back();
      d.back().threshold = std::nullopt;
    }
  }
  return d;
}

}  // namespace

std::map<std::string, double> read_thresholds_file(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw_error(ErrorKind::bad_input, "thresholds file '" + path.string() + "' is not valid JSON: " + e.what());
  }
  if (!j.is_object())
    throw_error(ErrorKind::bad_input, "thresholds file '" + path.string() + "' must hold a JSON object {\"layer\": threshold}");
  std::map<std::string, double> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number() || !std::isfinite(it.value().get<double>()) || it.value().get<double>() < 0)
      throw_error(ErrorKind::bad_input, "thresholds file '" + path.string() + "': the threshold of layer '" + it.key() +
                                            "' must be a finite number >= 0");
    out[it.key()] = it.value().get<double>();
  }
  return out;
}

void validate_options(const PruneOptions& o) {
  const int modes = (o.threshold || !o.layer_thresholds.empty() ? 1 : 0) + (o.target_params_reduction ? 1 : 0) +
                    (o.target_macs_reduction ? 1 : 0) + (o.uniform_rate ? 1 : 0) + (o.data ? 1 : 0);
  if (modes == 0)
    throw_error(ErrorKind::usage,
                "give --threshold, --thresholds, --target-params-reduction, --target-macs-reduction, --rate, or data "
                "(--config / --data) for data-driven thresholds");
  if (modes > 1)
    throw_error(ErrorKind::usage,
                "data-driven thresholds (--config / --data), --target-params-reduction, --target-macs-reduction and --rate "
                "exclude each other and the thresholds");
  if (o.uniform_rate && (!std::isfinite(*o.uniform_rate) || *o.uniform_rate < 0 || *o.uniform_rate >= 1))
    throw_error(ErrorKind::usage, "--rate must lie in [0, 1), e.g. 0.5 to remove half of every prunable layer's channels");
  if (o.threshold && (!std::isfinite(*o.threshold) || *o.threshold < 0))
    throw_error(ErrorKind::usage, "--threshold must be a finite number >= 0");
  for (const auto* t : {&o.target_params_reduction, &o.target_macs_reduction})
    if (*t && (!std::isfinite(**t) || **t <= 0 || **t >= 1))
      throw_error(ErrorKind::usage, "a reduction target must lie in (0, 1), e.g. 0.5 for half");
  validate_rate_grid(o.rates.empty() ? default_rate_grid() : o.rates);
}

namespace {

// Marks the groups of the layers named by --keep as fixed. ErrorKind::usage for an empty name, a
// name that is no layer of the model, or one that several layers carry.
void apply_keep(ChannelGraph& cg, const std::vector<std::string>& keep) {
  std::map<int, std::set<std::string>> kept;  // group -> the names that keep it
  for (const std::string& name : keep) {
    if (name.empty()) throw_error(ErrorKind::usage, "--keep: an empty layer name");
    std::vector<const Layer*> found;
    for (const auto& L : cg.layers)
      if (L.name == name) found.push_back(&L);
    if (found.empty()) {
      std::set<std::string> names;
      for (const auto& L : cg.layers) names.insert(L.name);
      std::string all;
      for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
      throw_error(ErrorKind::usage, "--keep names '" + name + "', which is not a layer of the model (its layers: " + all + ")");
    }
    if (found.size() > 1)
      throw_error(ErrorKind::usage, "--keep names '" + name + "', which " + std::to_string(found.size()) +
                                        " layers of the model are called: rename the nodes so that the name is unique");
    kept[found[0]->group].insert(name);
  }
  for (const auto& [gi, set] : kept) {
    std::string names;
    for (const auto& n : set) names += (names.empty() ? " " : ", ") + n;
    Group& g = cg.groups[static_cast<size_t>(gi)];
    if (g.fixed_reason.empty())
      g.fixed_reason = "kept (--keep" + names + ")";
    else
      spdlog::info("--keep{}: the layer is not prunable anyway ({})", names, g.fixed_reason);
  }
}

}  // namespace

void check_keep(const std::filesystem::path& model_path, const std::vector<std::string>& keep) {
  if (keep.empty()) return;
  const onnxu::Model model = onnxu::load_model(model_path);
  with_context("while checking --keep against '" + model_path.string() + "'", [&] {
    const onnxu::ShapeMap shapes = onnxu::infer_shapes(model.proto);
    const onnxu::GraphView view(model.proto.graph());
    ChannelGraph cg = analyze_channels(model.proto, view, shapes);
    apply_keep(cg, keep);
    return 0;
  });
}

namespace {

// The rates of one run and what the report says of how they were chosen.
struct RateChoice {
  std::vector<GroupDecision> decisions;                                   // per group
  json target;                                                            // --target-*: metric, goal, reached, threshold
  json data_report;                                                       // data-driven thresholds: losses, margin, upper bound
  json raw_threshold = json::array(), group_sensitivity = json::array();  // data-driven, per group
};

// --target-params-reduction / --target-macs-reduction: the global threshold whose rates come
// closest to the goal. The derived rates change only where the threshold crosses a grid error:
// each such threshold is tried.
RateChoice rates_for_target(const ChannelGraph& cg, const onnxu::GraphView& view, const onnxu::ShapeMap& shapes,
                            const Costs& before, const std::vector<double>& grid, const PruneOptions& o) {
  const bool by_params = o.target_params_reduction.has_value();
  const double goal = by_params ? *o.target_params_reduction : *o.target_macs_reduction;
  std::set<double> candidates{0.0};
  for (const auto& g : cg.groups) {
    if (!g.fixed_reason.empty()) continue;
    const auto order = removal_order(g);
    for (double r : grid) {
      const int64_t k = removed_count(r, static_cast<int64_t>(g.classes.size()));
      if (k < static_cast<int64_t>(g.classes.size())) candidates.insert(pruning_error(g, order, k));
    }
  }
  double best_t = 0, best_diff = INFINITY, best_reached = 0;
  for (double t : candidates) {
    auto d = decide(cg, grid, [&](const Group&) { return std::optional<double>(t); });
    const Costs after = count_costs(view, shapes, cg, kept_classes(cg, d));
    const double reached = by_params ? reduction(before.params, after.params) : reduction(before.macs, after.macs);
    if (std::fabs(reached - goal) < best_diff) {
      best_diff = std::fabs(reached - goal);
      best_t = t;
      best_reached = reached;
    }
  }
  RateChoice c;
  c.decisions = decide(cg, grid, [&](const Group&) { return std::optional<double>(best_t); });
  c.target = {{"metric", by_params ? "params" : "macs"}, {"goal", goal}, {"reached", best_reached}, {"threshold", best_t}};
  spdlog::info("global threshold {:.6g} reaches a {} reduction of {:.4f} (target {:.4f})", best_t,
               by_params ? "parameter" : "MAC", best_reached, goal);
  return c;
}

// Training data: per-group thresholds from the loss and connection sensitivity (data_thresholds.h).
RateChoice rates_from_data(const ChannelGraph& cg, const std::vector<double>& grid, const PruneOptions& o) {
  RateChoice c;
  const DataThresholds th = data_thresholds(cg, *o.data, grid);
  for (size_t gi = 0; gi < cg.groups.size(); ++gi)
    c.decisions.push_back(th.scaled[gi] ? derive_rate(cg.groups[gi], *th.scaled[gi], grid) : GroupDecision{});
  const NextBound nb = next_upper_bound(cg, th, c.decisions, grid);
  c.data_report = o.data_info.is_object() ? o.data_info : json::object();
  c.data_report["loss_before"] = o.data->loss_before;
  c.data_report["loss"] = o.data->loss;
  c.data_report["margin"] = o.data->margin;
  c.data_report["upper_bound"] = {{"limit", th.limit},
                                  {"used", th.bound},
                                  {"raw_threshold_norm", th.raw_norm},
                                  {"scaled", th.raw_norm > th.bound},
                                  {"next_if_accepted", nb.accepted},
                                  {"next_if_rejected", nb.rejected}};
  for (size_t gi = 0; gi < cg.groups.size(); ++gi) {
    c.raw_threshold.push_back(th.raw[gi] ? json(*th.raw[gi]) : json(nullptr));
    c.group_sensitivity.push_back(th.raw[gi] ? json(th.group_sensitivity[gi]) : json(nullptr));
  }
  spdlog::info("data-driven thresholds: L_before {:.6g}, L {:.6g}, margin {}, U {:.6g} (limit {:.6g}, ||th|| {:.6g})",
               o.data->loss_before, o.data->loss, o.data->margin, th.bound, th.limit, th.raw_norm);
  return c;
}

// The rates by the one threshold mode the options name.
RateChoice choose_rates(const ChannelGraph& cg, const onnxu::GraphView& view, const onnxu::ShapeMap& shapes, const Costs& before,
                        const std::vector<double>& grid, const PruneOptions& o) {
  if (o.target_params_reduction || o.target_macs_reduction) return rates_for_target(cg, view, shapes, before, grid, o);
  if (o.data) return rates_from_data(cg, grid, o);
  RateChoice c;
  if (o.uniform_rate) {
    for (const auto& g : cg.groups) c.decisions.push_back(uniform_rate(g, *o.uniform_rate));
  } else {
    c.decisions = decide(cg, grid, [&](const Group& g) { return group_threshold(cg, g, o); });
  }
  return c;
}

// The report's "layers": each prunable layer's rate, kept and removed channels, error, threshold.
json layers_report(const ChannelGraph& cg, const std::vector<GroupDecision>& decisions, const std::vector<char>& kept,
                   const PruneOptions& o) {
  json layers = json::array();
  for (const auto& L : cg.layers) {
    const Group& g = cg.groups[L.group];
    const GroupDecision& d = decisions[L.group];
    int64_t kept_channels = 0;
    json removed = json::array();
    for (int64_t c = 0; c < L.channels; ++c) {
      if (kept[cg.root(L.ids[c])])
        ++kept_channels;
      else
        removed.push_back(c);
    }
    json l = {{"name", L.name},
              {"op", L.op},
              {"weight", L.weight.name},
              {"channels", L.channels},
              {"group", L.group},
              {"rate", d.rate},
              {"kept_channels", kept_channels},
              {"pruning_error", d.error},
              {"prunable", g.fixed_reason.empty()}};
    l["removed_channels"] = std::move(removed);
    l["threshold"] = d.threshold && g.fixed_reason.empty() ? json(*d.threshold) : json(nullptr);  // null: not applied
    if (o.data) {
      auto it = o.data->sensitivity.find(L.weight.name);
      l["sensitivity"] = it != o.data->sensitivity.end() ? json(it->second) : json(nullptr);
      l["weight_elements"] = L.weight_numel;
    }
    if (!g.fixed_reason.empty()) l["reason"] = g.fixed_reason;
    layers.push_back(std::move(l));
  }
  return layers;
}

// The report's "groups" (layers that share channels); counts the prunable ones.
json groups_report(const ChannelGraph& cg, const RateChoice& c, const PruneOptions& o, size_t& prunable_groups) {
  json groups = json::array();
  prunable_groups = 0;
  for (size_t gi = 0; gi < cg.groups.size(); ++gi) {
    const Group& g = cg.groups[gi];
    const GroupDecision& d = c.decisions[gi];
    json members = json::array();
    for (int li : g.layers) members.push_back(cg.layers[li].name);
    json jg = {{"id", gi},
               {"layers", members},
               {"channels", g.classes.size()},
               {"rate", d.rate},
               {"kept_channels", static_cast<int64_t>(g.classes.size()) - d.removed},
               {"pruning_error", d.error},
               {"weight_elements", g.weight_numel},
               {"prunable", g.fixed_reason.empty()}};
    jg["threshold"] = d.threshold && g.fixed_reason.empty() ? json(*d.threshold) : json(nullptr);
    if (o.data) {
      jg["raw_threshold"] = c.raw_threshold[gi];
      jg["sensitivity"] = c.group_sensitivity[gi];
    }
    if (!g.fixed_reason.empty())
      jg["reason"] = g.fixed_reason;
    else
      ++prunable_groups;
    groups.push_back(std::move(jg));
  }
  return groups;
}

}  // namespace

json run_prune_rate(const PruneOptions& o) {
  validate_options(o);
  const std::vector<double> grid = !o.rates.empty() ? o.rates : o.data ? data_rate_grid() : default_rate_grid();

  onnxu::Model model = onnxu::load_model(o.model);
  const std::string where = "while pruning '" + o.model.string() + "'";
  json report;
  with_context(where, [&] {
    const onnxu::ShapeMap shapes = onnxu::infer_shapes(model.proto);
    const onnxu::GraphView view(model.proto.graph());
    ChannelGraph cg = analyze_channels(model.proto, view, shapes);

    std::set<std::string> layer_names;
    for (const auto& L : cg.layers) layer_names.insert(L.name);
    apply_keep(cg, o.keep);
    for (const auto& [name, t] : o.layer_thresholds)
      if (!layer_names.count(name)) spdlog::warn("thresholds file names '{}', which is not a prunable layer", name);

    const std::vector<char> all_kept(static_cast<size_t>(cg.id_count()), 1);
    const Costs before = count_costs(view, shapes, cg, all_kept);
    RateChoice choice = choose_rates(cg, view, shapes, before, grid, o);
    const std::vector<char> kept = kept_classes(cg, choice.decisions);
    const Costs after = count_costs(view, shapes, cg, kept);

    size_t prunable_groups = 0;
    json groups = groups_report(cg, choice, o, prunable_groups);
    if (prunable_groups == 0)
      spdlog::warn("'{}' has no prunable layer{}; nothing is pruned", o.model.string(),
                   o.keep.empty() ? "" : " left after --keep");
    report = {{"model", o.model.string()},
              {"output", o.output ? json(o.output->string()) : json(nullptr)},
              {"rates", grid},
              {"layers", layers_report(cg, choice.decisions, kept, o)},
              {"groups", std::move(groups)},
              {"totals",
               {{"params_before", before.params},
                {"params_after", after.params},
                {"params_reduction", reduction(before.params, after.params)},
                {"macs_before", before.macs},
                {"macs_after", after.macs},
                {"macs_reduction", reduction(before.macs, after.macs)},
                {"prunable_groups", prunable_groups}}}};
    if (!o.keep.empty()) report["keep"] = o.keep;
    if (o.threshold) report["threshold"] = *o.threshold;
    if (o.uniform_rate) report["uniform_rate"] = *o.uniform_rate;
    if (o.mask_channels) report["mask_channels"] = true;
    if (!choice.target.is_null()) report["target"] = choice.target;
    if (o.data) {
      bool changed = false;
      for (const auto& d : choice.decisions) changed = changed || d.removed > 0;
      choice.data_report["pruned_any"] = changed;  // false: the search ends (no layer changes)
      report["data_driven"] = choice.data_report;
    }

    if (o.output) {
      if (o.mask_channels) {  // every shape stays; the removed channels' filters, biases and BN scale/bias are 0
        json masked = json::array();
        for (const auto& m : apply_channel_mask(model.proto, cg, kept))
          masked.push_back({{"node", m.node}, {"tensor", m.tensor}, {"axis", m.axis}, {"channels", m.channels}});
        report["masked"] = std::move(masked);
      } else {
        const onnxu::ShapeMap original = onnxu::infer_shapes(model.proto, /*declared_outputs=*/false);
        apply_pruning(model.proto, cg, kept);
        onnxu::GraphView check(model.proto.graph());  // the result must still be a valid graph
        verify_pruned(model.proto, original);         // and compute with the shapes it had
      }
      onnxu::save_model(model.proto, *o.output, onnxu::output_save_options(model, o.external_data, o.overwrite));
      spdlog::info("wrote '{}': {} -> {} parameters, {} -> {} MACs", o.output->string(), before.params, after.params, before.macs,
                   after.macs);
    }
  });
  return report;
}

}  // namespace hpcnn::prune
