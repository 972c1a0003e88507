// hpcnn train: dist-train's JSON configuration. Every key is documented in configs/README.md.
// The defaults form the schema: a key that is not in it is an error listing the valid keys
// of its section; a value of the wrong JSON type is an error naming the key. Overrides
// ("section.key=value", the value parsed as JSON, or taken as a string when it is not JSON)
// are applied after the file, then everything is validated before any training starts.
// Relative paths are taken relative to the current directory.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "data/augment.h"
#include "data/config.h"
#include "train/optimizer.h"
#include "train/schedule.h"

namespace hpcnn::train {

struct TrainConfig {
  std::string model, output, metrics, checkpoint;
  // classification: softmax cross-entropy on class labels (top-1/top-5 accuracy); regression: mean
  // squared error on float targets [N, K] (MAE overall and per target; nn/regression.h).
  std::string task = "classification";
  int checkpoint_interval = 1;      // epochs (0: only on SIGTERM)
  data::DataConfig data;            // the "data" section (data/config.h)
  data::Augmentation augmentation;  // the "augmentation" section (data/augment.h, data/config.h)
  int epochs = 1, batch_size = 64, accumulation_steps = 1, eval_batch_size = 256;
  OptimizerOptions optimizer;
  LrSchedule lr;
  float label_smoothing = 0.0f;
  int final_polish_epochs = 0;
  double stop_at_validation_accuracy = 0;  // stop after the first epoch whose validation top-1 exceeds it (0: off)
  uint64_t seed = 1;
  bool deterministic = false;
  int threads = 0;  // per rank; 0: the cores of this node divided among its ranks
  bool sparse = false;
  // The gradient allreduce: flat | hierarchical | auto (dist/hierarchical.h).
  std::string exchange_algorithm = "auto";
  // Spatial split of 3-D CNNs (nn/spatial.h, spatial/group.h): groups of S consecutive
  // ranks share each sample, one depth slab per rank; 1: plain data parallelism. Global batch:
  // batch_size x ranks / S.
  int spatial = 1;
  // Pipeline (inter-layer) parallelism (nn/pipeline.h, train/pipeline_schedule.h): the graph cut
  // into P stages; ranks = P x D, stage-major (rank = stage x D + replica); each replica's batch_size
  // runs as `micro_batches` micro-batches of batch_size / micro_batches (GPipe or 1F1B order).
  // Cuts balanced by MACs, or after the P - 1 tensors of `pipeline_cuts`. Global batch:
  // batch_size x D. 1: no pipeline.
  int pipeline = 1;
  int micro_batches = 1;
  std::string pipeline_schedule = "gpipe";  // gpipe | 1f1b
  std::vector<std::string> pipeline_cuts;
  // Masked stage messages (train/pipeline_schedule.h): each crossing value travels as the channels
  // that are not structurally zero (nn/zero_channels.h: a prune-rate --mask-channels model), decided
  // once at the start; the parameter entries that hold the others at zero join the fixed mask.
  bool pipeline_masked_channels = false;
  std::string mask;                   // ONNX model whose zero weights give the sparsity mask
  int64_t max_steps_per_epoch = 0;    // 0: all (a limit for smoke tests)
  nlohmann::json merged;              // the merged configuration, as --print-config shows it
  std::vector<std::string> warnings;  // values load_config adjusted, for the caller to log once
};

// The schema: every key with its default (a default-constructed TrainConfig and the data sections'
// defaults, data/config.h).
nlohmann::json default_config();
// Reads `path` (may be empty: defaults only), applies overrides, validates.
TrainConfig load_config(const std::string& path, const std::vector<std::pair<std::string, std::string>>& overrides);

}  // namespace hpcnn::train
