// The CPU twin of ops/update.h.
#include <cmath>

#include "core/error.h"
#include "ops/cpu/kernels.h"

namespace hpcnn::ops::cpu {

namespace {
void same_length(const Tensor& a, const Tensor& b, const char* what) {
  if (a.numel() != b.numel())
    throw_error(ErrorKind::bad_input,
                std::string(what) + ": " + std::to_string(a.numel()) + " and " + std::to_string(b.numel()) + " elements");
}

void check_positions(const Tensor& positions, int64_t n, const char* what) {
  const int32_t* pos = positions.data_as<int32_t>();
  for (int64_t j = 0; j < positions.numel(); ++j)
    if (pos[j] < 0 || pos[j] >= n)
      throw_error(ErrorKind::bad_input,
                  std::string(what) + ": position " + std::to_string(pos[j]) + " outside [0, " + std::to_string(n) + ")");
}
}  // namespace

void gather(const Tensor& src, const Tensor& positions, Tensor& dst) {
  same_length(positions, dst, "gather");
  check_positions(positions, src.numel(), "gather");
  const int32_t* pos = positions.data_as<int32_t>();
  const float* s = src.data();
  float* d = dst.data();
  for (int64_t j = 0; j < dst.numel(); ++j) d[j] = s[pos[j]];
}

void scatter(const Tensor& src, const Tensor& positions, Tensor& dst) {
  same_length(positions, src, "scatter");
  check_positions(positions, dst.numel(), "scatter");
  const int32_t* pos = positions.data_as<int32_t>();
  const float* s = src.data();
  float* d = dst.data();
  for (int64_t j = 0; j < src.numel(); ++j) d[pos[j]] = s[j];
}

void scale(Tensor& x, float factor) {
  float* p = x.data();
#pragma omp parallel for simd if (x.numel() > (1 << 16))
  for (int64_t i = 0; i < x.numel(); ++i) p[i] *= factor;
}

void sgd_update(Tensor& w_t, const Tensor& g_t, Tensor& v_t, const SgdParams& p) {
  same_length(w_t, g_t, "sgd_update");
  same_length(w_t, v_t, "sgd_update");
  float* w = w_t.data();
  const float* g = g_t.data();
  float* v = v_t.data();
  const float lr = p.lr, mu = p.momentum, wd = p.weight_decay;
  for (int64_t j = 0; j < w_t.numel(); ++j) {
    const float gj = g[j] + wd * w[j];
    v[j] = mu * v[j] + gj;
    w[j] -= lr * (p.nesterov ? gj + mu * v[j] : v[j]);
  }
}

void lars_update(Tensor& w_t, const Tensor& g_t, Tensor& v_t, const SgdParams& p, float trust) {
  same_length(w_t, g_t, "lars_update");
  same_length(w_t, v_t, "lars_update");
  float* w = w_t.data();
  const float* g = g_t.data();
  float* v = v_t.data();
  const int64_t n = w_t.numel();
  double wn = 0, gn = 0;
  for (int64_t j = 0; j < n; ++j) {
    wn += static_cast<double>(w[j]) * w[j];
    gn += static_cast<double>(g[j]) * g[j];
  }
  wn = std::sqrt(wn);
  gn = std::sqrt(gn);
  const float wd = p.weight_decay, mu = p.momentum;
  const double local = (wn > 0 && gn > 0) ? trust * wn / (gn + wd * wn) : 1.0;
  const float s = static_cast<float>(p.lr * local);
  for (int64_t j = 0; j < n; ++j) {
    v[j] = mu * v[j] + s * (g[j] + wd * w[j]);
    w[j] -= v[j];
  }
}

}  // namespace hpcnn::ops::cpu
