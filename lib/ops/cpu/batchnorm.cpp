// Batch normalization on the CPU: per-channel statistics accumulated in double, per-thread
// partial sums over rows for channels-last data.
#include "ops/batchnorm.h"

#include <omp.h>

#include <cmath>
#include <vector>

#include "ops/cpu/channel_view.h"

namespace hpcnn::ops {

using cpu::ChannelView;

namespace {

void check_param(const Tensor& p, int64_t C, const char* what) {
  if (p.numel() != C)
    throw_error(ErrorKind::bad_input, std::string("BatchNormalization ") + what + " of shape " + shape_to_string(p.shape()) +
                                          " for " + std::to_string(C) + " channels");
}

// y = x * a[c] + b[c]
Tensor affine(const Tensor& x, const ChannelView& v, const std::vector<float>& a, const std::vector<float>& b) {
  Tensor y(x.shape(), x.layout());
  const float* xp = x.data();
  float* yp = y.data();
  const int64_t C = v.C, inner = v.inner;
#pragma omp parallel for collapse(2) if (x.numel() > 16384)
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t base = (o * C + c) * inner;
      const float ac = a[c], bc = b[c];
      for (int64_t i = 0; i < inner; ++i) yp[base + i] = xp[base + i] * ac + bc;
    }
  return y;
}

// Per-channel sums of f(x, c) into s1 and of g(x, c, flat index) into s2, over outer and inner.
template <class F, class G>
void channel_sums(const float* p, const ChannelView& v, std::vector<double>& s1, std::vector<double>& s2, F f, G g) {
  const int64_t C = v.C;
  s1.assign(C, 0.0);
  s2.assign(C, 0.0);
  if (v.inner == 1) {
    const int nt = omp_get_max_threads();
    std::vector<double> part1(static_cast<size_t>(nt) * C, 0.0), part2(static_cast<size_t>(nt) * C, 0.0);
#pragma omp parallel if (v.outer * C > 16384)
    {
      double* a1 = &part1[static_cast<size_t>(omp_get_thread_num()) * C];
      double* a2 = &part2[static_cast<size_t>(omp_get_thread_num()) * C];
#pragma omp for schedule(static)
      for (int64_t o = 0; o < v.outer; ++o) {
        const float* row = p + o * C;
        for (int64_t c = 0; c < C; ++c) {
          a1[c] += f(row[c], c);
          a2[c] += g(row[c], c, o * C + c);
        }
      }
    }
    for (int t = 0; t < nt; ++t)
      for (int64_t c = 0; c < C; ++c) {
        s1[c] += part1[static_cast<size_t>(t) * C + c];
        s2[c] += part2[static_cast<size_t>(t) * C + c];
      }
  } else {
#pragma omp parallel for if (v.outer * C * v.inner > 16384)
    for (int64_t c = 0; c < C; ++c) {
      double a1 = 0, a2 = 0;
      for (int64_t o = 0; o < v.outer; ++o) {
        const int64_t base = (o * C + c) * v.inner;
        for (int64_t i = 0; i < v.inner; ++i) {
          a1 += f(p[base + i], c);
          a2 += g(p[base + i], c, base + i);
        }
      }
      s1[c] = a1;
      s2[c] = a2;
    }
  }
}

}  // namespace

Tensor batchnorm_inference(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& mean,
                           const Tensor& var, float eps) {
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
  std::vector<double> sum, unused;
  channel_sums(x.data(), v, sum, unused, [](float a, int64_t) { return static_cast<double>(a); },
               [](float, int64_t, int64_t) { return 0.0; });
  std::vector<double> mean(v.C);
  for (int64_t c = 0; c < v.C; ++c) mean[c] = sum[c] / count;
  std::vector<double> sq;
  channel_sums(x.data(), v, sq, unused,
               [&](float a, int64_t c) { const double d = a - mean[c]; return d * d; },
               [](float, int64_t, int64_t) { return 0.0; });
  st.mean = Tensor({v.C});
  st.var = Tensor({v.C});
  st.invstd = Tensor({v.C});
  std::vector<float> a(v.C), b(v.C);
  for (int64_t c = 0; c < v.C; ++c) {
    const double var = sq[c] / count;
    const double inv = 1.0 / std::sqrt(var + eps);
    st.mean.data()[c] = static_cast<float>(mean[c]);
    st.var.data()[c] = static_cast<float>(var);
    st.invstd.data()[c] = static_cast<float>(inv);
    a[c] = static_cast<float>(scale.data()[c] * inv);
    b[c] = static_cast<float>(bias.data()[c] - mean[c] * scale.data()[c] * inv);
  }
  return affine(x, v, a, b);
}

void batchnorm_backward(const Tensor& x, const Tensor& scale, const BatchNormStats& st, const Tensor& gy_in,
                        Tensor* gx, Tensor* gscale, Tensor* gbias) {
  const Tensor gy = to_layout(gy_in, x.layout());
  const ChannelView v = cpu::channel_view(x);
  const double count = static_cast<double>(v.outer * v.inner);
  const float* mean = st.mean.data();
  const float* invstd = st.invstd.data();
  const float* xp = x.data();
  // dbias = sum(gy); dscale = sum(gy * xhat)
  std::vector<double> dbias, dscale;
  channel_sums(gy.data(), v, dbias, dscale, [](float g, int64_t) { return static_cast<double>(g); },
               [&](float g, int64_t c, int64_t idx) {
                 return static_cast<double>(g) * (static_cast<double>(xp[idx]) - mean[c]) * invstd[c];
               });
  if (gscale) {
    *gscale = Tensor({v.C});
    for (int64_t c = 0; c < v.C; ++c) gscale->data()[c] = static_cast<float>(dscale[c]);
  }
  if (gbias) {
    *gbias = Tensor({v.C});
    for (int64_t c = 0; c < v.C; ++c) gbias->data()[c] = static_cast<float>(dbias[c]);
  }
  if (gx) {
    // gx = scale * invstd * (gy - dbias/M - xhat * dscale/M)
    std::vector<float> k(v.C), mb(v.C), ms(v.C);
    for (int64_t c = 0; c < v.C; ++c) {
      k[c] = scale.data()[c] * invstd[c];
      mb[c] = static_cast<float>(dbias[c] / count);
      ms[c] = static_cast<float>(dscale[c] / count);
    }
    *gx = Tensor(x.shape(), x.layout());
    float* out = gx->data();
    const float* gp = gy.data();
    const int64_t C = v.C, inner = v.inner;
#pragma omp parallel for collapse(2) if (x.numel() > 16384)
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t base = (o * C + c) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const float xhat = (xp[base + i] - mean[c]) * invstd[c];
          out[base + i] = k[c] * (gp[base + i] - mb[c] - xhat * ms[c]);
        }
      }
  }
}

}  // namespace hpcnn::ops
