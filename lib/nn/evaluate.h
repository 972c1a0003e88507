// hpcnn nn: the one evaluation path (dist-train's per-epoch test evaluation, --evaluate, and the
// tools that evaluate a model: prune-rate's data-driven thresholds, bn-polish): a model in
// inference mode over labelled batches, giving top-1/top-5 accuracy and the mean softmax
// cross-entropy (no label smoothing unless asked), or over batches with regression targets,
// giving the mean squared error and the mean absolute error, overall and per target (nn/regression.h).
//
// images: [B, C, H, W] fp32 plain (already normalised as the model expects); labels: B class
// indices. The model's first output must be logits [B, K]. EvalSums add up over batches (and
// over ranks: its four numbers are plain sums). Errors: ErrorKind::bad_input when counts differ
// or a label is out of range (naming the sample); model errors name the node.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "nn/model.h"
#include "nn/regression.h"

namespace hpcnn::nn {

struct EvalSums {
  double loss = 0;  // sum over samples of the cross-entropy (regression: of the per-sample mean squared error)
  double top1 = 0;  // correct top-1 predictions
  double top5 = 0;
  double count = 0;           // samples
  RegressionSums regression;  // regression batches only

  // Every sum in one vector (for one allreduce) and back; `targets` is K (0: classification).
  std::vector<double> flat(int64_t targets) const;
  static EvalSums from_flat(const std::vector<double>& v, int64_t targets);
};

struct EvalResult {
  int64_t samples = 0;
  double top1 = 0;  // fraction in [0, 1]
  double top5 = 0;
  double mean_loss = 0;  // classification: cross-entropy; regression: mse
  // Regression (targets > 0): mean squared and absolute error over samples and targets, and the
  // absolute error per target averaged over samples.
  int64_t targets = 0;
  double mse = 0, mae = 0;
  std::vector<double> mae_per_target;
};

// Names sample n of a batch in errors ("sample 4711 of train-labels-idx1-ubyte"): the place in
// the data files, not in the batch.
using SampleNamer = std::function<std::string(int64_t n)>;

// Every label in [0, classes) (classes: the width of the model's logits), else
// ErrorKind::bad_input naming the first bad label's sample through `name` (or its position in
// the batch when `name` is empty) and the model's number of outputs.
void check_labels(std::span<const int32_t> labels, int64_t classes, const SampleNamer& name);

// One batch: forward in inference mode, labels checked (check_labels), added to `sums`.
void evaluate_batch(Model& model, const Tensor& images, std::span<const int32_t> labels, EvalSums& sums,
                    float label_smoothing = 0.0f, const SampleNamer& name = {});
// One regression batch: forward in inference mode, the first output [n, K] against `targets` [n, K].
void evaluate_regression_batch(Model& model, const Tensor& images, const Tensor& targets, EvalSums& sums);
EvalResult eval_result(const EvalSums& sums);

// A labelled set in memory, in batches of `batch_size` (the last one may be smaller).
EvalResult evaluate(Model& model, const Tensor& images, std::span<const int32_t> labels, int batch_size,
                    float label_smoothing = 0.0f);

}  // namespace hpcnn::nn
