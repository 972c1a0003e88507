// hpcnn nn: the loss of the training engine: softmax cross-entropy with label smoothing, the op
// contract of ops/loss.h (kernels per device), under the names the engine's users know.
#pragma once

#include "ops/loss.h"

namespace hpcnn::nn {

using ops::LossResult;
using ops::softmax_cross_entropy;

}  // namespace hpcnn::nn
