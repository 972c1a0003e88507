#include "nn/regression.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace hpcnn::nn {

RegressionLoss mean_squared_error(const Tensor& predictions, const Tensor& targets, Tensor* grad) {
  const Tensor p = to_layout(predictions.to(Device::cpu()), Layout::plain);
  if (p.rank() != 2 || targets.rank() != 2 || p.dim(0) != targets.dim(0) || p.dim(1) != targets.dim(1))
    throw_error(ErrorKind::bad_input, "regression: the model's predictions " + shape_to_string(p.shape()) +
                                          " do not match the targets " + shape_to_string(targets.shape()) + " ([N, K] each)");
  const int64_t N = p.dim(0), K = p.dim(1);
  RegressionLoss r;
  r.sums.absolute_error_per_target.assign(static_cast<size_t>(K), 0.0);
  r.sums.values = static_cast<double>(N * K);
  Tensor g;
  if (grad) g = Tensor({N, K});
  const double scale = N * K > 0 ? 2.0 / static_cast<double>(N * K) : 0.0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const double e = static_cast<double>(p.data()[n * K + k]) - static_cast<double>(targets.data()[n * K + k]);
      r.sums.squared_error += e * e;
      r.sums.absolute_error += std::abs(e);
      r.sums.absolute_error_per_target[static_cast<size_t>(k)] += std::abs(e);
      if (grad) g.data()[n * K + k] = static_cast<float>(scale * e);
    }
  r.mse = N * K > 0 ? r.sums.squared_error / static_cast<double>(N * K) : 0.0;
  if (grad) *grad = g.to(predictions.device());
  return r;
}

}  // namespace hpcnn::nn
