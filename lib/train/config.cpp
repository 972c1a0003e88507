#include "train/config.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data/augment.h"

namespace hpcnn::train {

using nlohmann::json;

json default_config() {
  return json{
      {"model", ""},
      {"output", ""},
      {"metrics", ""},
      {"checkpoint", {{"path", ""}, {"interval_epochs", 1}}},
      {"data",
       {{"train_images", ""},
        {"train_labels", ""},
        {"test_images", ""},
        {"test_labels", ""},
        {"cache", true},
        {"prefetch", 4},
        {"validation_samples", 0}}},
      {"augmentation",
       {{"crop_padding", 0},
        {"resized_crop_scale", {1.0, 1.0}},
        {"resized_crop_ratio", {3.0 / 4.0, 4.0 / 3.0}},
        {"horizontal_flip", false},
        {"erasing_probability", 0.0},
        {"erasing_scale", {0.02, 0.33}},
        {"erasing_ratio", {0.3, 3.3}},
        {"mean", {0.0}},
        {"std", {1.0}}}},
      {"epochs", 1},
      {"batch_size", 64},
      {"accumulation_steps", 1},
      {"eval_batch_size", 256},
      {"optimizer",
       {{"type", "sgd"},
        {"momentum", 0.9},
        {"nesterov", false},
        {"weight_decay", 0.0},
        {"weight_decay_skip_bn_bias", true},
        {"trust_coefficient", 0.001}}},
      {"lr",
       {{"base", 0.1},
        {"base_batch", 256},
        {"scaling", "linear"},
        {"warmup_epochs", 0.0},
        {"warmup_start", 0.0},
        {"decay", "cosine"},
        {"power", 2.0},
        {"final", 0.0}}},
      {"label_smoothing", 0.0},
      {"final_polish_epochs", 0},
      {"stop_at_validation_accuracy", 0.0},
      {"seed", 1},
      {"deterministic", false},
      {"threads", 0},
      {"sparse", false},
      {"mask", ""},
      {"max_steps_per_epoch", 0},
  };
}

namespace {

std::string keys_of(const json& schema) {
  std::string s;
  for (auto it = schema.begin(); it != schema.end(); ++it) s += (s.empty() ? "" : ", ") + it.key();
  return s;
}

bool same_kind(const json& schema, const json& v) {
  if (schema.is_number()) return v.is_number();
  if (schema.is_array()) return v.is_array();
  return schema.type() == v.type();
}

// Merges `user` into `base` (which holds the schema's keys), checking keys and types.
void merge(json& base, const json& user, const std::string& where) {
  if (!user.is_object())
    throw_error(ErrorKind::usage, (where.empty() ? "the configuration" : "'" + where + "'") + " must be a JSON object");
  for (auto it = user.begin(); it != user.end(); ++it) {
    const std::string key = where.empty() ? it.key() : where + "." + it.key();
    if (!base.contains(it.key()))
      throw_error(ErrorKind::usage, "unknown configuration key '" + key + "'; valid keys" +
                                        (where.empty() ? "" : " of '" + where + "'") + ": " + keys_of(base));
    json& slot = base[it.key()];
    if (slot.is_object()) {
      merge(slot, it.value(), key);
    } else {
      if (!same_kind(slot, it.value()))
        throw_error(ErrorKind::usage, "configuration key '" + key + "' must be a JSON " + std::string(slot.type_name()) +
                                          ", got " + it.value().dump());
      slot = it.value();
    }
  }
}

template <class T>
T get(const json& j, const char* key) {
  return j.at(key).get<T>();
}

void need(bool ok, const std::string& msg) {
  if (!ok) throw_error(ErrorKind::usage, msg);
}

}  // namespace

namespace {

TrainConfig parse_config(const std::string& path, const std::vector<std::pair<std::string, std::string>>& overrides,
                         bool require_model) {
  json cfg = default_config();
  if (!path.empty()) {
    std::ifstream in(path);
    if (!in) throw_error(ErrorKind::io, "cannot open configuration " + path);
    json user;
    try {
      user = json::parse(in, nullptr, true, /*ignore_comments=*/true);
    } catch (const json::parse_error& e) {
      throw_error(ErrorKind::usage, "configuration " + path + " is not valid JSON: " + e.what());
    } catch (const json::exception& e) {  // e.g. a number too large for a double
      throw_error(ErrorKind::usage, "configuration " + path + " holds a value out of range: " + e.what());
    }
    with_context("while reading configuration " + path, [&] {
      merge(cfg, user, "");
      return 0;
    });
  }
  for (const auto& [key, text] : overrides) {
    json value;
    try {
      value = json::parse(text);
    } catch (const json::parse_error&) {
      value = text;  // a bare string
    } catch (const json::exception& e) {
      throw_error(ErrorKind::usage, "override " + key + "=" + text + ": a value out of range (" + e.what() + ")");
    }
    // Build {"a": {"b": value}} from "a.b".
    json patch = value;
    std::vector<std::string> parts;
    std::stringstream ss(key);
    for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
    need(!parts.empty(), "empty override key");
    for (size_t i = parts.size(); i-- > 0;) patch = json{{parts[i], patch}};
    with_context("while applying override " + key + "=" + text, [&] {
      merge(cfg, patch, "");
      return 0;
    });
  }

  TrainConfig c;
  c.merged = cfg;
  c.model = get<std::string>(cfg, "model");
  c.output = get<std::string>(cfg, "output");
  c.metrics = get<std::string>(cfg, "metrics");
  c.checkpoint = get<std::string>(cfg["checkpoint"], "path");
  c.checkpoint_interval = get<int>(cfg["checkpoint"], "interval_epochs");
  const json& d = cfg["data"];
  c.data.train_images = get<std::string>(d, "train_images");
  c.data.train_labels = get<std::string>(d, "train_labels");
  c.data.test_images = get<std::string>(d, "test_images");
  c.data.test_labels = get<std::string>(d, "test_labels");
  c.data.cache = get<bool>(d, "cache");
  c.data.prefetch = get<int>(d, "prefetch");
  c.data.validation_samples = get<int64_t>(d, "validation_samples");
  const json& a = cfg["augmentation"];
  c.augmentation.crop_padding = get<int>(a, "crop_padding");
  c.augmentation.horizontal_flip = get<bool>(a, "horizontal_flip");
  auto pair = [&](const char* key) {
    const json& v = a.at(key);
    need(v.is_array() && v.size() == 2 && v[0].is_number() && v[1].is_number(),
         std::string("augmentation.") + key + " must be [min, max], two numbers, got " + v.dump());
    return std::array<double, 2>{v[0].get<double>(), v[1].get<double>()};
  };
  c.augmentation.resized_crop_scale = pair("resized_crop_scale");
  c.augmentation.resized_crop_ratio = pair("resized_crop_ratio");
  c.augmentation.erasing_probability = get<double>(a, "erasing_probability");
  c.augmentation.erasing_scale = pair("erasing_scale");
  c.augmentation.erasing_ratio = pair("erasing_ratio");
  c.augmentation.mean = get<std::vector<float>>(a, "mean");
  c.augmentation.std = get<std::vector<float>>(a, "std");
  c.epochs = get<int>(cfg, "epochs");
  c.batch_size = get<int>(cfg, "batch_size");
  c.accumulation_steps = get<int>(cfg, "accumulation_steps");
  c.eval_batch_size = get<int>(cfg, "eval_batch_size");
  const json& o = cfg["optimizer"];
  c.optimizer.type = get<std::string>(o, "type");
  c.optimizer.momentum = get<float>(o, "momentum");
  c.optimizer.nesterov = get<bool>(o, "nesterov");
  c.optimizer.weight_decay = get<float>(o, "weight_decay");
  c.optimizer.weight_decay_skip_bn_bias = get<bool>(o, "weight_decay_skip_bn_bias");
  c.optimizer.trust_coefficient = get<float>(o, "trust_coefficient");
  const json& l = cfg["lr"];
  c.lr.base = get<double>(l, "base");
  c.lr.base_batch = get<int64_t>(l, "base_batch");
  c.lr.scaling = get<std::string>(l, "scaling");
  c.lr.warmup_epochs = get<double>(l, "warmup_epochs");
  c.lr.warmup_start = get<double>(l, "warmup_start");
  c.lr.decay = get<std::string>(l, "decay");
  c.lr.power = get<double>(l, "power");
  c.lr.final_lr = get<double>(l, "final");
  c.label_smoothing = get<float>(cfg, "label_smoothing");
  c.final_polish_epochs = get<int>(cfg, "final_polish_epochs");
  c.stop_at_validation_accuracy = get<double>(cfg, "stop_at_validation_accuracy");
  c.seed = get<uint64_t>(cfg, "seed");
  c.deterministic = get<bool>(cfg, "deterministic");
  c.threads = get<int>(cfg, "threads");
  c.sparse = get<bool>(cfg, "sparse");
  c.mask = get<std::string>(cfg, "mask");
  c.max_steps_per_epoch = get<int64_t>(cfg, "max_steps_per_epoch");

  need(!require_model || !c.model.empty(), "configuration key 'model' (the ONNX model to train) is required");
  need(c.epochs >= 1, "epochs must be >= 1");
  need(c.batch_size >= 1, "batch_size must be >= 1");
  need(c.accumulation_steps >= 1, "accumulation_steps must be >= 1");
  need(c.eval_batch_size >= 1, "eval_batch_size must be >= 1");
  need(c.checkpoint_interval >= 0, "checkpoint.interval_epochs must be >= 0");
  need(c.data.prefetch >= 1, "data.prefetch must be >= 1");
  need(c.data.validation_samples >= 0, "data.validation_samples must be >= 0");
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
  need(c.augmentation.crop_padding >= 0, "augmentation.crop_padding must be >= 0");
  data::validate_augment(augment_options(c));  // ranges, and crop_padding with a resized crop
  need(!c.augmentation.mean.empty() && c.augmentation.mean.size() == c.augmentation.std.size(),
       "augmentation.mean and augmentation.std must have one value per channel");
  for (float s : c.augmentation.std) need(s > 0, "augmentation.std values must be > 0");
  need(c.optimizer.momentum >= 0 && c.optimizer.momentum < 1, "optimizer.momentum must be in [0, 1)");
  need(c.optimizer.weight_decay >= 0, "optimizer.weight_decay must be >= 0");
  need(c.optimizer.trust_coefficient > 0, "optimizer.trust_coefficient must be > 0");
  need(c.optimizer.type == "sgd" || c.optimizer.type == "lars",
       "optimizer.type '" + c.optimizer.type + "' is not one of: sgd, lars");
  need(c.threads >= 0, "threads must be >= 0");
  need(c.max_steps_per_epoch >= 0, "max_steps_per_epoch must be >= 0");
  c.lr.validate();
  return c;
}

}  // namespace

data::AugmentOptions augment_options(const TrainConfig& cfg) { return data::augment_options(cfg.augmentation); }

TrainConfig load_config(const std::string& path, const std::vector<std::pair<std::string, std::string>>& overrides) {
  return parse_config(path, overrides, true);
}

DataSpec load_data_spec(const std::string& path) {
  TrainConfig c = parse_config(path, {}, false);
  return {c.data, c.augmentation};
}

}  // namespace hpcnn::train
