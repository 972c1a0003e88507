// hpcnn tools: the one option group for training data, shared by every tool that reads data
// without training it (prune-rate's data-driven thresholds, sparsify-fcl's data-aware
// initialisation, bn-polish):
//
//   --config TRAIN.json                       the data a dist-train configuration describes
//                                             (data.train_*, augmentation.mean/std)
//   --data IMAGES [--labels LABELS] --mean M --std S
//                                             the files directly (IDX, CIFAR-10, NPY, gzipped or
//                                             huffgpu-encoded: data/dataset.h), and the
//                                             per-channel normalisation ("0.286" or "0.49,0.48,0.45")
//
// Exactly one of --config and --data (ErrorKind::usage otherwise); --labels/--mean/--std only
// with --data. The samples are normalised only (no augmentation), as the model saw them in
// evaluation.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "data/config.h"
#include "data/source.h"
#include "dist/communicator.h"
#include "measure/sensitivity.h"

namespace hpcnn::tool {

struct DataOptions {
  std::string config;
  std::string images, labels, mean, std;
  bool given() const;  // any flag of the group was used
};

// The training data as the configuration's sections (data/config.h): --data/--labels give
// data.train_images/train_labels, --mean/--std augmentation.mean/std; with --config the file's
// sections, whose data.validation_samples are held out (never read here) and whose data.test_*
// bn-polish --test-accuracy evaluates on. Augmentation other than mean/std is not applied.
using TrainingData = data::DataSections;

// Adds the group's flags to `app` (in the option group "Training data").
void add_data_options(CLI::App& app, DataOptions& options);
// Checks the combination and reads --config when given. ErrorKind::usage for bad combinations
// or numbers, the configuration's own errors otherwise.
TrainingData resolve_data_options(const DataOptions& options);

// The samples of data.train_* (data/source.h: without the held-out validation split), and the
// batches a tool reads from them: the first `batches` x `batch_size`, normalised with
// augmentation.mean/std (measure/sensitivity.h). With `comm` (a tool under mpirun: bn-polish), the
// samples are decoded once per node as data.node_cache says (measure/node_cache.h; collective over
// each node).
std::shared_ptr<const data::SampleSource> open_training_data(const TrainingData& data, dist::Communicator* comm = nullptr);
measure::SensitivityOptions first_batches_options(const TrainingData& data, int64_t batches, int64_t batch_size);

}  // namespace hpcnn::tool
