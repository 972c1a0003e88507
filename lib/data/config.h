// hpcnn data: the "data" and "augmentation" sections of a training configuration (configs/README.md
// documents every key), read, written and checked here for every tool: dist-train (train/config.h
// holds the rest of its configuration) to train and evaluate, prune-rate, sparsify-fcl and bn-polish
// (tools/common/data_options.h) to measure. Each section is one struct whose fields are named like
// its JSON keys; a default-constructed struct is the section's schema and defaults
// (core/json_config.h), written once.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "data/augment.h"
#include "data/source.h"

namespace hpcnn::data {

// The "data" section.
struct DataConfig {
  std::string train_images, train_labels, test_images, test_labels;  // paths; labels may be empty
  bool cache = true;                                                 // keep decoded samples in memory
  int prefetch = 4;                                                  // batches queued by the loader thread
  int64_t validation_samples = 0;  // the last N training samples form the validation split (not trained on)
  // dist-train with cache: decode once per node into memory the node's ranks share (measure/node_cache.h):
  // "on", "off", or "auto" (on when the node runs more than one rank).
  std::string node_cache = "auto";
};

// JSON <-> struct, key for key (the sections' defaults: nlohmann::json(DataConfig{}), nlohmann::json(Augmentation{})).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(DataConfig, train_images, train_labels, test_images, test_labels, cache, prefetch,
                                   validation_samples, node_cache)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Augmentation, crop_padding, resized_crop_scale, resized_crop_ratio, horizontal_flip,
                                   erasing_probability, erasing_scale, erasing_ratio, mean, std, log1p, random_flips_3d,
                                   random_axis_permutation)

// The two sections of a configuration.
struct DataSections {
  DataConfig data;
  Augmentation augmentation;
};

// {"data": defaults, "augmentation": defaults}: the part of a configuration's schema these sections own.
nlohmann::json data_sections_schema();

// The sections of `config`, a configuration already merged into a schema that contains
// data_sections_schema() (core/json_config.h), checked: ErrorKind::usage naming the key for
// data.prefetch < 1, data.validation_samples < 0, data.node_cache not auto/on/off, a range key that is not [min, max] (two
// numbers), an augmentation the loader refuses (data/augment.h: validate_augment), mean and std of
// different lengths or a std value <= 0.
DataSections parse_data_sections(const nlohmann::json& config);

// The sections of the configuration file at `path`, for the tools that read training data without
// training: its "data" and "augmentation" sections are merged into their schema and checked as
// above; other top-level keys belong to dist-train (train/config.h) and are not looked at.
// Errors: read_json_file's, merge_into_schema's and parse_data_sections'.
DataSections load_data_sections(const std::string& path);

// The samples of `images` (with `labels` when not empty), logged as "<what> data: N samples from
// ...". ErrorKind::usage naming the configuration key 'data.<what>_images' when `images` is empty;
// the readers' errors otherwise (data/source.h).
std::shared_ptr<const SampleSource> open_configured(const std::string& images, const std::string& labels, bool cache,
                                                    const char* what);

// The samples of an evaluation split: "test" (data.test_*) or "validation" (the last
// data.validation_samples training samples). ErrorKind::usage for another split name or a
// validation split of 0 samples.
std::shared_ptr<const SampleSource> open_split(const DataConfig& data, const std::string& split);

}  // namespace hpcnn::data
