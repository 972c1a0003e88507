// hpcnn nn: evaluation entry point used by dist-train, bn-polish and prune-rate: runs a model in
// inference mode over a labelled dataset and reports top-1/top-5 accuracy and the mean
// softmax cross-entropy (no label smoothing unless asked).
//
// images: [N, C, H, W] fp32 plain (already normalised as the model expects); labels: N class
// indices. The model's first output must be logits [B, K]. Batches of `batch_size` (the last
// one may be smaller). Errors: ErrorKind::bad_input when counts differ or a label is out of
// range (naming the sample); model errors name the node.
#pragma once

#include <cstdint>
#include <span>

#include "nn/model.h"

namespace hpcnn::nn {

struct EvalResult {
  int64_t samples = 0;
  double top1 = 0;       // fraction in [0, 1]
  double top5 = 0;
  double mean_loss = 0;
};

EvalResult evaluate(Model& model, const Tensor& images, std::span<const int32_t> labels, int batch_size,
                    float label_smoothing = 0.0f);

}  // namespace hpcnn::nn
