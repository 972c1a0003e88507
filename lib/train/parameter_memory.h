// hpcnn train: the bytes one rank holds for its parameters and their optimizer, by category, as
// allocated (Tensor::bytes() of the live buffers, not a formula), for dist-train's log line and
// summary ("parameter_memory") and the compact-state measurement of issue 45 (Singh & Bhatele,
// "Exploiting sparsity in pruned neural networks to optimize large model training", IPDPS 2023,
// section on the pruning-aware optimizer: state only for the weights that survive pruning).
//
//   weights    the dense f32 parameters (computed dense: N floats)
//   gradients  the dense f32 gradients the backward pass writes (N floats once allocated)
//   fused      the fused gradient buffer of the exchange (T floats: the kept entries of the
//              sparse buffers and every dense buffer; T = N for a dense layout)
//   state      the optimizer state: the momentum / LARS velocity (T floats; SGD and LARS keep one)
//   positions  the sparse positions, i32 offsets within their tensor, one copy (on the device);
//              T - (elements of the dense buffers) of them; 0 for a dense layout
// There is no fp32 master copy: training is fp32 throughout, the weights are the master.
// The optimizer's step also allocates, per sparse tensor and only during its update, a compact
// copy of its kept weights (at most the largest tensor's kept count of floats): not held, not counted.
#pragma once

#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/model.h"
#include "train/gradient_exchange.h"
#include "train/optimizer.h"

namespace hpcnn::train {

struct ParameterMemory {
  size_t weights = 0, gradients = 0, fused = 0, state = 0, positions = 0;
  // What the optimizer adds to the weights and gradients: fused buffer, state and positions.
  size_t optimizer() const { return fused + state + positions; }
  size_t total() const { return weights + gradients + optimizer(); }
  nlohmann::json to_json() const;  // {"weights": bytes, ..., "optimizer": bytes, "total": bytes}
};

ParameterMemory parameter_memory(const std::vector<nn::Parameter>& params, GradientExchange& exchange, Optimizer& optimizer);

}  // namespace hpcnn::train
