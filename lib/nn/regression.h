// hpcnn nn: the regression loss of the training engine and its metrics: mean squared error (the
// CosmoFlow reference's loss, MLPerf HPC) and mean absolute error per target (its quality metric).
//
// predictions: the model's first output [N, K] fp32 (any device, any layout); targets: [N, K] fp32
// on the host (data/loader.h's Batch::targets). The loss is the mean over all N * K values, as
// PyTorch's F.mse_loss and Keras's "mse" compute it:
//   loss = sum_{n,k} (p_nk - t_nk)^2 / (N K),   d loss / d p_nk = 2 (p_nk - t_nk) / (N K).
// N * K values are few (CosmoFlow: 4 per sample), so every device's predictions are reduced on
// the host and the gradient is copied back to the predictions' device: there is no device twin.
// Errors: ErrorKind::bad_input when the predictions are not [N, K] with the targets' N and K
// (naming both shapes).
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace hpcnn::nn {

// Sums over a batch, to be added over batches and ranks.
struct RegressionSums {
  double squared_error = 0;                       // sum of (p - t)^2 over samples and targets
  double absolute_error = 0;                      // sum of |p - t| over samples and targets
  std::vector<double> absolute_error_per_target;  // K sums over samples
  double values = 0;                              // N * K
};

struct RegressionLoss {
  double mse = 0;  // the loss: squared_error / (N K)
  RegressionSums sums;
};

RegressionLoss mean_squared_error(const Tensor& predictions, const Tensor& targets, Tensor* grad);

}  // namespace hpcnn::nn
