// hpcnn data: the "data" and "augmentation" sections of a training configuration (configs/README.md
// documents every key), as the tools read them: dist-train to train and evaluate, prune-rate,
// sparsify-fcl and bn-polish to measure. The JSON schema, its defaults and its checks are in
// train/config.cpp (load_config, load_data_spec); these are the parsed values.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/augment.h"
#include "data/source.h"

namespace hpcnn::data {

struct DataConfig {
  std::string train_images, train_labels, test_images, test_labels;  // paths; labels may be empty
  bool cache = true;                                                 // keep decoded samples in memory
  int prefetch = 4;                                                  // batches queued by the loader thread
  int64_t validation_samples = 0;  // the last N training samples form the validation split (not trained on)
};

struct AugmentConfig {
  int crop_padding = 0;                                // random crop with this much zero padding (0: off)
  std::array<double, 2> resized_crop_scale{1.0, 1.0};  // random resized crop (off at [1, 1]), data/augment.h
  std::array<double, 2> resized_crop_ratio{3.0 / 4.0, 4.0 / 3.0};
  bool horizontal_flip = false;
  double erasing_probability = 0;  // random erasing (0: off), data/augment.h
  std::array<double, 2> erasing_scale{0.02, 0.33}, erasing_ratio{0.3, 3.3};
  std::vector<float> mean{0.0f}, std{1.0f};  // per channel, after scaling u8 pixels to [0, 1]
};

// The loader's augmentation options (data/augment.h) of a configuration's augmentation section.
AugmentOptions augment_options(const AugmentConfig& augmentation);

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
