#include "train/config.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <type_traits>

#include "core/error.h"
#include "core/json_config.h"

namespace hpcnn::train {

using nlohmann::json;

namespace {

using Pointer = json::json_pointer;

// Every key of the configuration outside its data sections (data/config.h), with the field that
// holds it: visit(key, field) per key, in one list for writing (the schema, from a
// default-constructed TrainConfig) and for reading.
template <class Config, class Visit>
void visit_keys(Config& c, Visit&& visit) {
  visit("/model", c.model);
  visit("/task", c.task);
  visit("/output", c.output);
  visit("/metrics", c.metrics);
  visit("/checkpoint/path", c.checkpoint);
  visit("/checkpoint/interval_epochs", c.checkpoint_interval);
  visit("/epochs", c.epochs);
  visit("/batch_size", c.batch_size);
  visit("/accumulation_steps", c.accumulation_steps);
  visit("/eval_batch_size", c.eval_batch_size);
  visit("/optimizer/type", c.optimizer.type);
  visit("/optimizer/momentum", c.optimizer.momentum);
  visit("/optimizer/nesterov", c.optimizer.nesterov);
  visit("/optimizer/weight_decay", c.optimizer.weight_decay);
  visit("/optimizer/weight_decay_skip_bn_bias", c.optimizer.weight_decay_skip_bn_bias);
  visit("/optimizer/trust_coefficient", c.optimizer.trust_coefficient);
  visit("/lr/base", c.lr.base);
  visit("/lr/base_batch", c.lr.base_batch);
  visit("/lr/scaling", c.lr.scaling);
  visit("/lr/warmup_epochs", c.lr.warmup_epochs);
  visit("/lr/warmup_start", c.lr.warmup_start);
  visit("/lr/decay", c.lr.decay);
  visit("/lr/power", c.lr.power);
  visit("/lr/final", c.lr.final_lr);
  visit("/lr/step_epochs", c.lr.step_epochs);
  visit("/lr/step_factors", c.lr.step_factors);
  visit("/label_smoothing", c.label_smoothing);
  visit("/final_polish_epochs", c.final_polish_epochs);
  visit("/stop_at_validation_accuracy", c.stop_at_validation_accuracy);
  visit("/seed", c.seed);
  visit("/deterministic", c.deterministic);
  visit("/threads", c.threads);
  visit("/sparse", c.sparse);
  visit("/mask", c.mask);
  visit("/exchange/algorithm", c.exchange_algorithm);
  visit("/parallel/spatial", c.spatial);
  visit("/parallel/pipeline", c.pipeline);
  visit("/parallel/micro_batches", c.micro_batches);
  visit("/parallel/pipeline_schedule", c.pipeline_schedule);
  visit("/parallel/pipeline_cuts", c.pipeline_cuts);
  visit("/parallel/pipeline_masked_channels", c.pipeline_masked_channels);
  visit("/max_steps_per_epoch", c.max_steps_per_epoch);
}

void need(bool ok, const std::string& msg) {
  if (!ok) throw_error(ErrorKind::usage, msg);
}

}  // namespace

namespace {

// A default as the JSON a user writes: a float field's 0.9f as 0.9 (its shortest decimal form), not 0.8999999761581421.
template <class T>
json as_written(const T& value) {
  if constexpr (std::is_same_v<T, float>) {
    char text[32];
    const auto end = std::to_chars(text, text + sizeof text, value).ptr;
    return std::strtod(std::string(text, end).c_str(), nullptr);
  } else {
    return value;
  }
}

}  // namespace

json default_config() {
  const TrainConfig defaults;
  json j = data::data_sections_schema();
  visit_keys(defaults, [&](const char* key, const auto& field) { j[Pointer(key)] = as_written(field); });
  return j;
}

TrainConfig load_config(const std::string& path, const std::vector<std::pair<std::string, std::string>>& overrides) {
  json cfg = default_config();
  if (!path.empty()) {
    const json user = read_json_file(path);
    with_context("while reading configuration " + path, [&] {
      merge_into_schema(cfg, user, "");
      return 0;
    });
  }
  for (const auto& [key, text] : overrides) apply_override(cfg, key, text);

  TrainConfig c;
  c.merged = cfg;
  visit_keys(c, [&](const char* key, auto& field) {
    try {
      cfg.at(Pointer(key)).get_to(field);
    } catch (const json::type_error&) {  // e.g. a list of strings where numbers belong: name the key
      std::string dotted = std::string(key + 1);
      std::replace(dotted.begin(), dotted.end(), '/', '.');
      throw_error(ErrorKind::usage, "configuration key '" + dotted + "' has a value of the wrong type: " +
                                        cfg.at(Pointer(key)).dump() + " (its default: " + as_written(field).dump() + ")");
    }
  });
  data::DataSections sections = data::parse_data_sections(cfg);
  c.data = std::move(sections.data);
  c.augmentation = std::move(sections.augmentation);

  need(!c.model.empty(), "configuration key 'model' (the ONNX model to train) is required");
  need(c.epochs >= 1, "epochs must be >= 1");
  need(c.batch_size >= 1, "batch_size must be >= 1");
  need(c.accumulation_steps >= 1, "accumulation_steps must be >= 1");
  need(c.eval_batch_size >= 1, "eval_batch_size must be >= 1");
  need(c.checkpoint_interval >= 0, "checkpoint.interval_epochs must be >= 0");
  need(c.stop_at_validation_accuracy >= 0 && c.stop_at_validation_accuracy < 1,
       "stop_at_validation_accuracy must lie in [0, 1) (a fraction; 0: never stop early)");
  need(c.stop_at_validation_accuracy == 0 || c.data.validation_samples > 0,
       "stop_at_validation_accuracy needs a validation split (data.validation_samples > 0)");
  need(c.label_smoothing >= 0 && c.label_smoothing < 1, "label_smoothing must be in [0, 1)");
  need(c.final_polish_epochs >= 0, "final_polish_epochs must be >= 0");
  if (c.final_polish_epochs > c.epochs - 1) {
    // A short run (--epochs 1 with a recipe's final_polish_epochs 2) still trains on augmented
    // data first: at most epochs - 1 polishing epochs.
    const int clamped = std::max(0, c.epochs - 1);
    c.warnings.push_back("final_polish_epochs " + std::to_string(c.final_polish_epochs) + " clamped to " +
                         std::to_string(clamped) + " (epochs " + std::to_string(c.epochs) + ")");
    c.final_polish_epochs = clamped;
    c.merged["final_polish_epochs"] = clamped;
  }
  need(c.optimizer.momentum >= 0 && c.optimizer.momentum < 1, "optimizer.momentum must be in [0, 1)");
  need(c.optimizer.weight_decay >= 0, "optimizer.weight_decay must be >= 0");
  need(c.optimizer.trust_coefficient > 0, "optimizer.trust_coefficient must be > 0");
  need(c.optimizer.type == "sgd" || c.optimizer.type == "lars",
       "optimizer.type '" + c.optimizer.type + "' is not one of: sgd, lars");
  need(c.task == "classification" || c.task == "regression",
       "task '" + c.task + "' is not one of: classification, regression");
  if (c.task == "regression") {
    need(c.label_smoothing == 0,
         "label_smoothing is a classification option (it smooths class labels); the configuration's task is regression: "
         "remove it or set it to 0");
    need(c.stop_at_validation_accuracy == 0,
         "stop_at_validation_accuracy is a classification option (there is no accuracy); the configuration's task is "
         "regression");
  }
  need(c.threads >= 0, "threads must be >= 0");
  need(c.spatial >= 1, "parallel.spatial must be >= 1 (1: no spatial split)");
  need(c.pipeline >= 1, "parallel.pipeline must be >= 1 (1: no pipeline)");
  need(c.micro_batches >= 1, "parallel.micro_batches must be >= 1");
  need(c.pipeline_schedule == "gpipe" || c.pipeline_schedule == "1f1b",
       "parallel.pipeline_schedule '" + c.pipeline_schedule + "' is not one of: gpipe, 1f1b");
  if (c.pipeline > 1) {
    need(c.micro_batches >= c.pipeline,
         "parallel.micro_batches " + std::to_string(c.micro_batches) + " is smaller than the " + std::to_string(c.pipeline) +
             " pipeline stages (m >= P: otherwise a stage idles for whole micro-batches)");
    need(c.batch_size % c.micro_batches == 0, "batch_size " + std::to_string(c.batch_size) + " is not divisible by parallel.micro_batches " +
                                                  std::to_string(c.micro_batches) + " (each micro-batch has batch_size / micro_batches samples)");
    need(c.spatial == 1, "parallel.pipeline and parallel.spatial do not combine yet (set one of them to 1)");
    need(c.accumulation_steps == 1,
         "accumulation_steps with parallel.pipeline: the micro-batches are the accumulation (set accumulation_steps to 1)");
    need(c.checkpoint.empty(), "checkpoint.path with parallel.pipeline: checkpoints of a pipeline run are not built yet "
                               "(set checkpoint.path to \"\")");
  }
  need(!c.pipeline_masked_channels || c.pipeline > 1,
       "parallel.pipeline_masked_channels needs parallel.pipeline > 1 (it shrinks the stage-to-stage messages)");
  need(c.pipeline_cuts.empty() || static_cast<int>(c.pipeline_cuts.size()) == c.pipeline - 1,
       "parallel.pipeline_cuts names " + std::to_string(c.pipeline_cuts.size()) + " tensor(s); parallel.pipeline " +
           std::to_string(c.pipeline) + " needs " + std::to_string(c.pipeline - 1) + " (or none: cuts balanced by MACs)");
  need(c.max_steps_per_epoch >= 0, "max_steps_per_epoch must be >= 0");
  need(c.exchange_algorithm == "flat" || c.exchange_algorithm == "hierarchical" || c.exchange_algorithm == "auto",
       "exchange.algorithm '" + c.exchange_algorithm + "' is not one of: flat, hierarchical, auto");
  c.lr.validate();
  return c;
}

}  // namespace hpcnn::train
