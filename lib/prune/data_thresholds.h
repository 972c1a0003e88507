// hpcnn prune: data-driven per-group thresholds and their global bound (Sakai, Eto, Teranishi,
// "Structured pruning for deep neural networks with adaptive pruning rate derivation based on
// connection sensitivity and loss function", JAIT 13(3), 2022, Sec. 3; Sakai et al., ICPR 2022;
// the authors' code FujitsuResearch/automatic_pruning, auto_prune_cifar10.py, functions
// calculate_thresholds, scale_thresholds, initialize_upper_bound, update_upper_bound).
//
// From a measured loss and connection sensitivity (measure/sensitivity.h, reached through plain
// numbers so that prune needs no engine):
//   raw threshold     th_g = (L_before * (1 + margin) - L) * S_g / N_g
//                     with S_g, N_g the sums of S_p and of the element counts N_p over the weights
//                     of the group's layers (the authors have one layer per group: th_l = ... S_l / N_l;
//                     our groups tie the layers that must share one kept-channel set, so their
//                     budgets add up). L_before: the loss of the original model; L: of the model now
//                     being pruned (L = L_before in the first iteration: th_g = margin * L * S_g/N_g).
//   bound limit       U_limit = sqrt(G) * max(max_g th_g, max_g E_g(r_max)), over the G prunable
//                     groups, E_g(r_max) the pruning error at the largest grid rate (at most C-1
//                     removed). (The authors' code takes the threshold of the lexicographically last
//                     layer name for max_g th_g, an accident of max() over dict items; we take the
//                     maximum.)
//   scaling           if ||th||_2 > U: th_g <- th_g * U / ||th||_2 (never scaled up); U = U_limit
//                     unless given (the loop carries U between iterations).
//   next bound        after the model pruned with these thresholds is fine-tuned:
//                     accepted: U' = min(U * max(2, min_g (1 + Einc_g / th_g)), U_limit)
//                     rejected: U' = min(U * min(1/2, max_g (1 - Edec_g / th_g)), U_limit)
//                     Einc_g: the threshold rise that reaches g's next larger grid rate (the smallest
//                     E_g(r) - th_g over larger rates that keep a channel; 1e6 when there is none);
//                     Edec_g = th_g - E_g(chosen rate) (1e6 when that is 0); both 0 for groups at rate 0.
//                     A negative U' (every layer far below its threshold after a rejection) ends the
//                     search, as in the authors' code.
// Units: losses in nats (mean cross-entropy), S in 1/(loss per weight unit), thresholds and
// pruning errors in weight units (mean |w| of the removed filters over the group's elements).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "prune/channel_graph.h"
#include "prune/rates.h"

namespace hpcnn::prune {

struct DataThresholdInputs {
  double loss_before = 0;                     // L_before >= 0
  double loss = 0;                            // L (of the model being pruned) >= 0
  double margin = 0.1;                        // >= 0
  std::map<std::string, double> sensitivity;  // S_p by weight initializer name (every group member's weight)
  std::optional<double> upper_bound;          // U (> 0); absent: U_limit
};

struct DataThresholds {
  std::vector<std::optional<double>> raw;     // per group; nullopt for fixed groups
  std::vector<std::optional<double>> scaled;  // what decides the rates
  std::vector<double> group_sensitivity;      // S_g (0 for fixed groups)
  double raw_norm = 0;                        // ||raw||_2 over the prunable groups
  double limit = 0;                           // U_limit
  double bound = 0;                           // U used
};

// ErrorKind::usage for bad numbers; ErrorKind::bad_input when a member's weight has no sensitivity.
DataThresholds data_thresholds(const ChannelGraph& cg, const DataThresholdInputs& in, const std::vector<double>& grid);

struct NextBound {
  double accepted = 0, rejected = 0;
};
NextBound next_upper_bound(const ChannelGraph& cg, const DataThresholds& th, const std::vector<GroupDecision>& decisions,
                           const std::vector<double>& grid);

}  // namespace hpcnn::prune
