// hpcnn ops: softmax cross-entropy with label smoothing (Szegedy et al., "Rethinking the
// Inception architecture", 2016, section 7) on a model's logits.
//
// logits: [N, K] fp32 (plain); labels: N class indices in [0, K) (host memory). With smoothing
// e, the target distribution is (1 - e) * onehot(label) + e / K. Returns the mean loss over the
// batch and, when `grad` is non-null, d(mean loss)/d(logits) = (softmax(logits) - target) / N
// in *grad ([N, K], on the logits' device). Computed with the log-sum-exp shift (finite for any
// finite logits). Errors: ErrorKind::bad_input for a label out of range (naming the sample), a
// logits tensor that is not 2-D, or a label count != N.
#pragma once

#include <cstdint>
#include <span>

#include "tensor/tensor.h"

namespace hpcnn::ops {

struct LossResult {
  double loss = 0;       // mean over the batch
  int64_t correct1 = 0;  // samples whose label is the arg-max logit
  int64_t correct5 = 0;  // samples whose label is among the 5 largest logits
};

LossResult softmax_cross_entropy(const Tensor& logits, std::span<const int32_t> labels, float label_smoothing, Tensor* grad);

}  // namespace hpcnn::ops
