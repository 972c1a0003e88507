// hpcnn train: dist-train's training loop: data-parallel SGD/LARS over a Communicator, with the
// large-batch recipe (scaled learning rate, warm-up, label smoothing, Final Polishing: the last
// final_polish_epochs epochs train on non-augmented data, Kasagi et al., HPDC 2020), the sparse
// gradient exchange of pruned models, checkpoints and metrics.
//
// Every rank calls run_training() with the same configuration. After request_stop() (a first SIGTERM/SIGINT)
// it checkpoints at the next step and returns {"stopped": true, ...} on every rank. With a validation
// split (data.validation_samples) every epoch also reports its accuracy, and
// stop_at_validation_accuracy ends the run after the first epoch above it (fine-tuning in
// prune-rate's loop: accept as soon as the pruned model is good enough, Sakai et al., ICPR 2022). Rank 0 writes the output model,
// checkpoints and the metrics file; the returned summary is the same on every rank. Errors
// throw hpcnn::Error naming the rank where it matters; the caller aborts the job (MPI_Abort).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "dist/communicator.h"
#include "train/config.h"

namespace hpcnn::train {

struct RunOptions {
  std::string resume;  // checkpoint to resume from ("" = start fresh)
  // Called on rank 0 after every optimizer step: epoch (0-based), epochs, steps done in the
  // epoch, steps per epoch, mean training loss of the epoch so far (a tool's progress bar).
  std::function<void(int64_t epoch, int64_t epochs, int64_t done, int64_t total, double loss)> on_step;
};

nlohmann::json run_training(const TrainConfig& cfg, dist::Communicator& comm, const RunOptions& options);
// The checkpoint `dist-train --resume auto` continues: cfg.checkpoint when rank 0 finds a file
// there, else "" (a fresh start), the same answer on every rank (rank 0 looks, then broadcasts;
// a rank that cannot read the file then fails in run_training, naming it). For jobs that are
// requeued or rerun after a kill: one command line starts and continues them. Throws
// ErrorKind::usage when the configuration names no checkpoint.
std::string checkpoint_to_resume(const TrainConfig& cfg, dist::Communicator& comm);
// measure::evaluate_model (measure/evaluate.h) with the configuration's data, eval_batch_size and threads:
// accuracy and loss of `model_path` (or cfg.model when empty) on cfg.data.test_* (split "test") or
// on the validation split held out of the training data (split "validation": the last
// data.validation_samples samples). Keys: "<split>_accuracy", "<split>_top5", "<split>_loss",
// "samples", "seconds", "images_per_second" (inference throughput of the evaluation, all ranks),
// "parameters" and "macs" (onnx/costs.h, as the compression tools count them), "model_bytes"
// (the model file; external data not counted).
nlohmann::json run_evaluation(const TrainConfig& cfg, dist::Communicator& comm, const std::string& model_path,
                              const std::string& split = "test");

// Asks a running training to checkpoint and stop at the next step (async-signal-safe); `signal`
// is the signal that asked, named in the log.
void request_stop(int signal);
// Exit status after a stop request was honoured (128 + SIGTERM).
inline constexpr int kStoppedExitCode = 143;

}  // namespace hpcnn::train
