#include "data/config.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/json_config.h"

namespace hpcnn::data {

nlohmann::json data_sections_schema() { return nlohmann::json{{"data", DataConfig{}}, {"augmentation", Augmentation{}}}; }

namespace {

void need(bool ok, const std::string& message) {
  if (!ok) throw_error(ErrorKind::usage, message);
}

// A range key: [min, max], two numbers (nlohmann would read [1, 2, 3] into std::array<double, 2>).
void check_pair(const nlohmann::json& section, const char* key) {
  const nlohmann::json& v = section.at(key);
  need(v.is_array() && v.size() == 2 && v[0].is_number() && v[1].is_number(),
       std::string("augmentation.") + key + " must be [min, max], two numbers, got " + v.dump());
}

}  // namespace

DataSections parse_data_sections(const nlohmann::json& config) {
  const nlohmann::json& a = config.at("augmentation");
  for (const char* key : {"resized_crop_scale", "resized_crop_ratio", "erasing_scale", "erasing_ratio"}) check_pair(a, key);
  for (const char* key : {"mean", "std"})
    for (const auto& v : a.at(key))
      need(v.is_number(), std::string("augmentation.") + key + " must hold numbers, got " + a.at(key).dump());
  DataSections s{config.at("data").get<DataConfig>(), a.get<Augmentation>()};
  need(s.data.prefetch >= 1, "data.prefetch must be >= 1");
  need(s.data.validation_samples >= 0, "data.validation_samples must be >= 0");
  need(s.data.node_cache == "auto" || s.data.node_cache == "on" || s.data.node_cache == "off",
       "data.node_cache must be auto, on or off, got '" + s.data.node_cache + "'");
  need(s.augmentation.crop_padding >= 0, "augmentation.crop_padding must be >= 0");
  validate_augment(s.augmentation);  // ranges, and crop_padding with a resized crop
  need(!s.augmentation.mean.empty() && s.augmentation.mean.size() == s.augmentation.std.size(),
       "augmentation.mean and augmentation.std must have one value per channel");
  for (float v : s.augmentation.std) need(v > 0, "augmentation.std values must be > 0");
  return s;
}

DataSections load_data_sections(const std::string& path) {
  const nlohmann::json file = read_json_file(path);
  nlohmann::json config = data_sections_schema();
  with_context("while reading configuration " + path, [&] {
    need(file.is_object(), "the configuration must be a JSON object");
    for (const char* section : {"data", "augmentation"})
      if (file.contains(section)) merge_into_schema(config[section], file[section], section);
    return 0;
  });
  return parse_data_sections(config);
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
