// hpcnn measure: accuracy and loss of a model on labelled data, the one evaluation of every tool
// (dist-train's per-epoch validation and test accuracy and --evaluate, bn-polish --test-accuracy).
//
// The model runs in inference mode (nn/evaluate.h: BatchNormalization with its running statistics,
// no Dropout) on the samples normalised only (the configuration's mean/std; no augmentation), in
// batches of `batch_size`; under mpirun each rank runs its shard of the samples and the sums are
// allreduced, so every rank gets the same result.
// Errors: ErrorKind::usage for a split other than test or validation, or a validation split of 0
// samples; ErrorKind::bad_input for an image shape the model rejects (measure/input_shape.h) or a
// label out of range (naming the sample's index in its labels file); model errors name the node.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "data/augment.h"
#include "data/config.h"
#include "data/source.h"
#include "dist/communicator.h"
#include "nn/evaluate.h"
#include "nn/model.h"

namespace hpcnn::measure {

struct EvalOptions {
  int batch_size = 256;          // samples per forward batch (the configuration's eval_batch_size)
  uint64_t seed = 1;             // the loader's seed (evaluation order does not depend on it)
  int prefetch = 4;              // batches queued by the loader thread
  data::Augmentation normalise;  // its mean and std are applied; augmentation stays off
  // A depth-split model (nn/spatial.h): groups of `slabs` consecutive ranks evaluate the same
  // samples, each its slab (the loader reads only that slab); the data are sharded over the
  // groups and each sample is counted once. evaluate_samples takes a model already split for the
  // group; evaluate_model splits the model file itself (spatial/group.h over `comm`).
  int slabs = 1;
};

// Loss, top-1 and top-5 sums over `samples` (all ranks together); for samples with regression
// targets (SampleSource::target_width() > 0) the squared and absolute error sums instead.
nn::EvalSums evaluate_samples(nn::Model& model, const EvalOptions& options, dist::Communicator& comm,
                              const std::shared_ptr<const data::SampleSource>& samples);

// The metrics of an evaluation under their JSON names, each prefixed by `prefix` ("test_",
// "validation_", or ""): classification "accuracy", "top5", "loss"; regression "mse", "mae",
// "mae_per_target" (a list of K).
nlohmann::json metrics_json(const nn::EvalResult& result, const std::string& prefix);

// The model file at `model_path` on `split` ("test": data.test_*; "validation": the last
// data.validation_samples training samples). Keys: "<split>_accuracy", "<split>_top5",
// "<split>_loss" (regression data: "mse", "mae", "mae_per_target", unprefixed), "samples", "seconds", "images_per_second" (inference throughput, all ranks),
// "parameters" and "macs" (onnx/costs.h, as the compression tools count them), "model_bytes" (the
// model file; external data not counted), "model", "split", "world_size".
nlohmann::json evaluate_model(const std::string& model_path, const std::string& split, const data::DataConfig& data,
                              const EvalOptions& options, dist::Communicator& comm);

}  // namespace hpcnn::measure
