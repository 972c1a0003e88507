#include <cmath>

#include "core/error.h"
#include "ops/cpu/kernels.h"

namespace hpcnn::ops::cpu {

// The loops read the parameters from locals and the data through __restrict pointers (a store to
// the output could otherwise change `p`), and vectorize with -fno-trapping-math (lib/ops/CMakeLists.txt).
Tensor activation_forward(const Tensor& x, const ActivationParams& p) {
  Tensor y(x.shape(), x.layout());
  const float* __restrict a = x.data();
  float* __restrict b = y.data();
  const int64_t n = x.numel();
  const float alpha = p.alpha, lo = p.lo, hi = p.hi;
  switch (p.kind) {
    case Activation::relu:
#pragma omp parallel for simd if (n > 65536)
      for (int64_t i = 0; i < n; ++i) b[i] = a[i] > 0.0f ? a[i] : 0.0f;
      break;
    case Activation::leaky_relu:
#pragma omp parallel for simd if (n > 65536)
      for (int64_t i = 0; i < n; ++i) b[i] = a[i] >= 0.0f ? a[i] : alpha * a[i];
      break;
    case Activation::sigmoid:
#pragma omp parallel for if (n > 65536)
      for (int64_t i = 0; i < n; ++i) b[i] = 1.0f / (1.0f + std::exp(-a[i]));
      break;
    case Activation::clip:
#pragma omp parallel for simd if (n > 65536)
      for (int64_t i = 0; i < n; ++i) b[i] = std::min(std::max(a[i], lo), hi);
      break;
    case Activation::tanh:
#pragma omp parallel for if (n > 65536)
      for (int64_t i = 0; i < n; ++i) b[i] = std::tanh(a[i]);
      break;
  }
  return y;
}

Tensor activation_backward(const Tensor& saved, const Tensor& gy_in, const ActivationParams& p) {
  const Tensor gy = to_layout(gy_in, saved.layout());
  Tensor gx(saved.shape(), saved.layout());
  const float* __restrict s = saved.data();
  const float* __restrict g = gy.data();
  float* __restrict o = gx.data();
  const int64_t n = saved.numel();
  const float alpha = p.alpha, lo = p.lo, hi = p.hi;
  switch (p.kind) {
    case Activation::relu:
#pragma omp parallel for simd if (n > 65536)
      for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i];  // unconditional load: a blend, not a branch
        o[i] = s[i] > 0.0f ? gi : 0.0f;
      }
      break;
    case Activation::leaky_relu:
#pragma omp parallel for simd if (n > 65536)
      for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i];
        o[i] = s[i] >= 0.0f ? gi : alpha * gi;
      }
      break;
    case Activation::sigmoid:
#pragma omp parallel for simd if (n > 65536)
      for (int64_t i = 0; i < n; ++i) o[i] = g[i] * s[i] * (1.0f - s[i]);
      break;
    case Activation::clip:
#pragma omp parallel for simd if (n > 65536)
      for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i];
        o[i] = (s[i] >= lo && s[i] <= hi) ? gi : 0.0f;
      }
      break;
    case Activation::tanh:
#pragma omp parallel for simd if (n > 65536)
      for (int64_t i = 0; i < n; ++i) o[i] = g[i] * (1.0f - s[i] * s[i]);
      break;
  }
  return gx;
}

Tensor dropout_forward(const Tensor& x, float ratio, std::mt19937_64& rng, std::vector<uint8_t>& mask) {
  if (!(ratio >= 0.0f && ratio < 1.0f))
    throw_error(ErrorKind::bad_input, "Dropout ratio " + std::to_string(ratio) + " outside [0, 1)");
  const int64_t n = x.numel();
  mask.resize(static_cast<size_t>(n));
  std::bernoulli_distribution keep(1.0 - ratio);
  for (int64_t i = 0; i < n; ++i) mask[i] = keep(rng) ? 1 : 0;
  const float scale = 1.0f / (1.0f - ratio);
  Tensor y(x.shape(), x.layout());
  for (int64_t i = 0; i < n; ++i) y.data()[i] = mask[i] ? x.data()[i] * scale : 0.0f;
  return y;
}

Tensor dropout_backward(const Tensor& gy_in, float ratio, const std::vector<uint8_t>& mask, Layout x_layout) {
  const Tensor gy = to_layout(gy_in, x_layout);
  const float scale = 1.0f / (1.0f - ratio);
  Tensor gx(gy.shape(), gy.layout());
  for (int64_t i = 0; i < gy.numel(); ++i) gx.data()[i] = mask[i] ? gy.data()[i] * scale : 0.0f;
  return gx;
}

}  // namespace hpcnn::ops::cpu
