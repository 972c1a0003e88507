// hpcnn prune: the prune-rate job (Sakai et al., "Automatic pruning rate derivation for
// structured pruning of deep neural networks", ICPR 2022).
//
// Loads an ONNX model, finds the prunable layers and their channel dependency groups, derives
// each group's pruning rate from the L1 pruning error and a threshold (one for all, one per
// layer, data-driven from the loss and connection sensitivity with a global bound, or the global
// threshold closest to a parameter/MAC reduction target) or takes one uniform
// rate for every group (the L1-norm baseline: the smallest filters go first), optionally writes
// the physically smaller model, and returns the report (JSON; fields in tools/prune-rate/README.md).
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "onnx/model.h"
#include "prune/data_thresholds.h"

namespace hpcnn::prune {

struct PruneOptions {
  std::filesystem::path model;
  std::optional<std::filesystem::path> output;     // -o: write the pruned model
  std::optional<double> threshold;                 // --threshold
  std::map<std::string, double> layer_thresholds;  // --thresholds FILE, by layer name
  std::optional<double> target_params_reduction;   // in (0, 1)
  std::optional<double> target_macs_reduction;     // in (0, 1)
  std::optional<double> uniform_rate;              // --rate: one rate for every prunable group, in [0, 1)
  std::vector<std::string> keep;                   // --keep: layers never pruned (with every layer of their group)
  std::optional<DataThresholdInputs> data;         // data-driven thresholds (prune/data_thresholds.h)
  nlohmann::ordered_json data_info;                // copied into the report's "data_driven" (batches, samples, ...)
  bool mask_channels = false;                      // --mask-channels: zero the removed channels, keep shapes (masking.h)
  std::vector<double> rates;                       // the grid (default 0.0, 0.1, ..., 0.9; 0.0, ..., 0.5 with data)
  onnxu::ExternalData external_data = onnxu::ExternalData::automatic;
  bool overwrite = true;
};

// Reads a thresholds file: a JSON object {"layer name": threshold, ...}. ErrorKind::bad_input
// for malformed JSON or values that are not finite non-negative numbers (naming the key).
std::map<std::string, double> read_thresholds_file(const std::filesystem::path& path);

// Checks the option combination (exactly one threshold mode, values in range). ErrorKind::usage.
void validate_options(const PruneOptions& options);

nlohmann::ordered_json run_prune_rate(const PruneOptions& options);

// Checks --keep names against the model before any expensive work (the same rules as
// run_prune_rate: every name one layer of the model, no empty name). ErrorKind::usage.
void check_keep(const std::filesystem::path& model, const std::vector<std::string>& keep);

}  // namespace hpcnn::prune
