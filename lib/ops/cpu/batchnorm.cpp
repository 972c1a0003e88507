// Batch normalization on the CPU. Per-channel statistics accumulate in double. Channels-last
// tensors (nhwc: [rows, C] with C contiguous) run row by row with SIMD over C and per-thread
// partial sums; plain [N, C, inner] tensors run channel by channel.
#include <omp.h>

#include <cmath>
#include <vector>

#include "ops/cpu/channel_view.h"
#include "ops/cpu/kernels.h"

namespace hpcnn::ops::cpu {

namespace {

void check_param(const Tensor& p, int64_t C, const char* what) {
  if (p.numel() != C)
    throw_error(ErrorKind::bad_input, std::string("BatchNormalization ") + what + " of shape " + shape_to_string(p.shape()) +
                                          " for " + std::to_string(C) + " channels");
}

constexpr int64_t kParallelMin = 16384;

// y = x * a[c] + b[c]
Tensor affine(const Tensor& x, const ChannelView& v, const std::vector<float>& a_in, const std::vector<float>& b_in) {
  Tensor y(x.shape(), x.layout());
  const float* xp = x.data();
  float* yp = y.data();
  const float* a = a_in.data();
  const float* b = b_in.data();
  const int64_t C = v.C, inner = v.inner;
  if (inner == 1) {
#pragma omp parallel for if (x.numel() > kParallelMin)
    for (int64_t o = 0; o < v.outer; ++o) {
      const float* xr = xp + o * C;
      float* yr = yp + o * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * a[c] + b[c];
    }
  } else {
#pragma omp parallel for collapse(2) if (x.numel() > kParallelMin)
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t base = (o * C + c) * inner;
        const float ac = a[c], bc = b[c];
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) yp[base + i] = xp[base + i] * ac + bc;
      }
  }
  return y;
}

// Per-channel sums of p and of p*q (q may be p): s1[c] = sum p, s2[c] = sum p*q.
void channel_sums2(const float* p, const float* q, const ChannelView& v, std::vector<double>& s1, std::vector<double>& s2) {
  const int64_t C = v.C;
  s1.assign(C, 0.0);
  s2.assign(C, 0.0);
  if (v.inner == 1) {
    const bool par = v.outer * C > kParallelMin;
    const int nt = par ? omp_get_max_threads() : 1;
    std::vector<double> part(static_cast<size_t>(nt) * 2 * C, 0.0);
#pragma omp parallel if (par)
    {
      double* a1 = &part[static_cast<size_t>(omp_get_thread_num()) * 2 * C];
      double* a2 = a1 + C;
#pragma omp for schedule(static)
      for (int64_t o = 0; o < v.outer; ++o) {
        const float* pr = p + o * C;
        const float* qr = q + o * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          a1[c] += pr[c];
          a2[c] += static_cast<double>(pr[c]) * qr[c];
        }
      }
    }
    for (int t = 0; t < nt; ++t)
      for (int64_t c = 0; c < C; ++c) {
        s1[c] += part[static_cast<size_t>(t) * 2 * C + c];
        s2[c] += part[static_cast<size_t>(t) * 2 * C + C + c];
      }
  } else {
#pragma omp parallel for if (v.outer * C * v.inner > kParallelMin)
    for (int64_t c = 0; c < C; ++c) {
      double a1 = 0, a2 = 0;
      for (int64_t o = 0; o < v.outer; ++o) {
        const int64_t base = (o * C + c) * v.inner;
#pragma omp simd reduction(+ : a1, a2)
        for (int64_t i = 0; i < v.inner; ++i) {
          a1 += p[base + i];
          a2 += static_cast<double>(p[base + i]) * q[base + i];
        }
      }
      s1[c] = a1;
      s2[c] = a2;
    }
  }
}

}  // namespace

Tensor batchnorm_inference(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& mean, const Tensor& var,
                           float eps) {
  const ChannelView v = cpu::channel_view(x);
  check_param(scale, v.C, "scale");
  check_param(bias, v.C, "bias");
  check_param(mean, v.C, "mean");
  check_param(var, v.C, "var");
  std::vector<float> a(v.C), b(v.C);
  for (int64_t c = 0; c < v.C; ++c) {
    const float inv = 1.0f / std::sqrt(var.data()[c] + eps);
    a[c] = scale.data()[c] * inv;
    b[c] = bias.data()[c] - mean.data()[c] * a[c];
  }
  return affine(x, v, a, b);
}

Tensor batchnorm_training(const Tensor& x, const Tensor& scale, const Tensor& bias, float eps, BatchNormStats& st) {
  const ChannelView v = cpu::channel_view(x);
  check_param(scale, v.C, "scale");
  check_param(bias, v.C, "bias");
  const double count = static_cast<double>(v.outer * v.inner);
  if (count == 0) throw_error(ErrorKind::bad_input, "BatchNormalization over an empty batch");
  // One pass: sum and sum of squares in double (var = E[x^2] - E[x]^2).
  std::vector<double> sum, sq;
  channel_sums2(x.data(), x.data(), v, sum, sq);
  st.mean = Tensor({v.C});
  st.var = Tensor({v.C});
  st.invstd = Tensor({v.C});
  std::vector<float> a(v.C), b(v.C);
  for (int64_t c = 0; c < v.C; ++c) {
    const double mean = sum[c] / count;
    const double var = std::max(0.0, sq[c] / count - mean * mean);
    const double inv = 1.0 / std::sqrt(var + eps);
    st.mean.data()[c] = static_cast<float>(mean);
    st.var.data()[c] = static_cast<float>(var);
    st.invstd.data()[c] = static_cast<float>(inv);
    a[c] = static_cast<float>(scale.data()[c] * inv);
    b[c] = static_cast<float>(bias.data()[c] - mean * scale.data()[c] * inv);
  }
  st.count = count;
  st.sum = std::move(sum);
  st.sum_sq = std::move(sq);
  return affine(x, v, a, b);
}

void batchnorm_backward(const Tensor& x, const Tensor& scale, const BatchNormStats& st, const Tensor& gy_in, Tensor* gx,
                        Tensor* gscale, Tensor* gbias) {
  const Tensor gy = to_layout(gy_in, x.layout());
  const ChannelView v = cpu::channel_view(x);
  const double count = static_cast<double>(v.outer * v.inner);
  const float* mean = st.mean.data();
  const float* invstd = st.invstd.data();
  // One pass: sum(gy) and sum(gy * x); dscale = invstd * (sum(gy x) - mean sum(gy)) = sum(gy xhat).
  std::vector<double> dbias, gyx;
  channel_sums2(gy.data(), x.data(), v, dbias, gyx);
  std::vector<double> dscale(v.C);
  for (int64_t c = 0; c < v.C; ++c) dscale[c] = invstd[c] * (gyx[c] - mean[c] * dbias[c]);
  if (gscale) {
    *gscale = Tensor({v.C});
    for (int64_t c = 0; c < v.C; ++c) gscale->data()[c] = static_cast<float>(dscale[c]);
  }
  if (gbias) {
    *gbias = Tensor({v.C});
    for (int64_t c = 0; c < v.C; ++c) gbias->data()[c] = static_cast<float>(dbias[c]);
  }
  if (gx) {
    // gx = k * (gy - dbias/M - xhat * dscale/M), xhat = (x - mean) * invstd: an affine map of
    // (gy, x) per channel: gx = k * gy + u * x + w.
    std::vector<float> k(v.C), u(v.C), w(v.C);
    for (int64_t c = 0; c < v.C; ++c) {
      const double kc = scale.data()[c] * static_cast<double>(invstd[c]);
      k[c] = static_cast<float>(kc);
      if (st.is_frozen) {  // constant statistics: no gradient through the moments
        u[c] = w[c] = 0.0f;
        continue;
      }
      const double ms = dscale[c] / count * invstd[c];
      u[c] = static_cast<float>(-kc * ms);
      w[c] = static_cast<float>(kc * (-dbias[c] / count + mean[c] * ms));
    }
    *gx = Tensor(x.shape(), x.layout());
    float* out = gx->data();
    const float* gp = gy.data();
    const float* xp = x.data();
    const int64_t C = v.C, inner = v.inner;
    const float* kp = k.data();
    const float* up = u.data();
    const float* wp = w.data();
    if (inner == 1) {
#pragma omp parallel for if (x.numel() > kParallelMin)
      for (int64_t o = 0; o < v.outer; ++o) {
        const float* gr = gp + o * C;
        const float* xr = xp + o * C;
        float* r = out + o * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) r[c] = kp[c] * gr[c] + up[c] * xr[c] + wp[c];
      }
    } else {
#pragma omp parallel for collapse(2) if (x.numel() > kParallelMin)
      for (int64_t o = 0; o < v.outer; ++o)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t base = (o * C + c) * inner;
          const float kc = kp[c], uc = up[c], wc = wp[c];
#pragma omp simd
          for (int64_t i = 0; i < inner; ++i) out[base + i] = kc * gp[base + i] + uc * xp[base + i] + wc;
        }
    }
  }
}

}  // namespace hpcnn::ops::cpu
