#include "common/data_options.h"

#include "common/numbers.h"
#include "core/error.h"
#include "data/config.h"
#include "measure/node_cache.h"

namespace hpcnn::tool {

namespace {

std::vector<float> parse_floats(const std::string& text, const char* flag) {
  const std::vector<double> v = parse_number_list(text, flag);
  return {v.begin(), v.end()};
}

}  // namespace

void add_data_options(CLI::App& app, DataOptions& o) {
  const std::string group = "Training data";
  app.add_option("--config", o.config, "dist-train configuration whose data.train_* and augmentation.mean/std to use")
      ->group(group);
  app.add_option("--data", o.images, "Training images (IDX, CIFAR-10 .bin, .npy; gzipped or .huf)")->group(group);
  app.add_option("--labels", o.labels, "Their labels (IDX or .npy; none for CIFAR-10)")->group(group);
  app.add_option("--mean", o.mean, "Per-channel mean after scaling pixels to [0, 1], e.g. 0.286 or 0.49,0.48,0.45")->group(group);
  app.add_option("--std", o.std, "Per-channel standard deviation, as --mean")->group(group);
}

bool DataOptions::given() const { return !config.empty() || !images.empty() || !labels.empty() || !mean.empty() || !std.empty(); }

TrainingData resolve_data_options(const DataOptions& o) {
  const bool direct = !o.images.empty() || !o.labels.empty() || !o.mean.empty() || !o.std.empty();
  if (o.config.empty() == !direct || (direct && o.images.empty()))
    throw_error(ErrorKind::usage, "training data: give --config TRAIN.json, or --data IMAGES [--labels LABELS] --mean M --std S");
  TrainingData d;
  if (!o.config.empty()) {
    d = data::load_data_sections(o.config);
    if (d.data.train_images.empty()) throw_error(ErrorKind::usage, "configuration " + o.config + " names no data.train_images");
    return d;
  }
  if (o.mean.empty() || o.std.empty()) throw_error(ErrorKind::usage, "--data needs --mean and --std (the model's normalisation)");
  d.data.train_images = o.images;
  d.data.train_labels = o.labels;
  d.augmentation.mean = parse_floats(o.mean, "--mean");
  d.augmentation.std = parse_floats(o.std, "--std");
  if (d.augmentation.mean.size() != d.augmentation.std.size())
    throw_error(ErrorKind::usage, "--mean and --std need the same number of values");
  for (float s : d.augmentation.std)
    if (!(s > 0)) throw_error(ErrorKind::usage, "--std values must be > 0");
  return d;
}

std::shared_ptr<const data::SampleSource> open_training_data(const TrainingData& d, dist::Communicator* comm) {
  if (comm) {
    auto all = measure::open_node_cached(d.data.train_images, d.data.train_labels, d.data, *comm, "train");
    return d.data.validation_samples > 0 ? data::split_validation(all, d.data.validation_samples).first : all;
  }
  data::DataFiles files;
  files.images = {d.data.train_images};
  if (!d.data.train_labels.empty()) files.labels = {d.data.train_labels};
  files.cache = d.data.cache;
  auto all = data::open_source(files);
  return d.data.validation_samples > 0 ? data::split_validation(all, d.data.validation_samples).first : all;
}

measure::SensitivityOptions first_batches_options(const TrainingData& d, int64_t batches, int64_t batch_size) {
  measure::SensitivityOptions so;
  so.batches = batches;
  so.batch_size = batch_size;
  so.normalise.mean = d.augmentation.mean;
  so.normalise.std = d.augmentation.std;
  so.normalise.log1p = d.augmentation.log1p;
  return so;
}

}  // namespace hpcnn::tool
