#include "data/config.h"

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace hpcnn::data {

AugmentOptions augment_options(const AugmentConfig& c) {
  AugmentOptions a;
  a.pad = c.crop_padding;
  a.flip = c.horizontal_flip;
  a.resized_scale = c.resized_crop_scale;
  a.resized_ratio = c.resized_crop_ratio;
  a.erase_probability = c.erasing_probability;
  a.erase_scale = c.erasing_scale;
  a.erase_ratio = c.erasing_ratio;
  a.mean = c.mean;
  a.std = c.std;
  return a;
}

std::shared_ptr<const SampleSource> open_configured(const std::string& images, const std::string& labels, bool cache,
                                                    const char* what) {
  if (images.empty()) throw_error(ErrorKind::usage, std::string("configuration key 'data.") + what + "_images' is required");
  DataFiles f;
  f.images = {images};
  if (!labels.empty()) f.labels = {labels};
  f.cache = cache;
  auto source = open_source(f);
  spdlog::info("{} data: {} samples from {}", what, source->size(), source->origin());
  return source;
}

std::shared_ptr<const SampleSource> open_split(const DataConfig& data, const std::string& split) {
  if (split == "test") return open_configured(data.test_images, data.test_labels, data.cache, "test");
  if (split != "validation") throw_error(ErrorKind::usage, "evaluation split '" + split + "': expected test or validation");
  if (data.validation_samples <= 0)
    throw_error(ErrorKind::usage, "--split validation needs data.validation_samples > 0 in the configuration");
  return split_validation(open_configured(data.train_images, data.train_labels, data.cache, "train"), data.validation_samples)
      .second;
}

}  // namespace hpcnn::data
