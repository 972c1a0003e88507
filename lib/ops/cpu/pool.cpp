// Pooling on the CPU in nhwc: the channel loop is innermost and contiguous.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "ops/conv.h"
#include "ops/cpu/kernels.h"

namespace hpcnn::ops::cpu {

namespace {

struct Geometry {
  int64_t N, C, H, W, OH, OW;
  std::array<int64_t, 4> pads;
};

Geometry geometry(const Shape& xs, const Pool2dParams& p, const char* op) {
  if (xs.size() != 4)
    throw_error(ErrorKind::unsupported,
                std::string(op) + " of a " + std::to_string(xs.size()) + "-D input: only 2-D pooling is supported");
  Geometry g{xs[0], xs[1], xs[2], xs[3], 0, 0, p.pads};
  g.pads = resolve_pads<2>(p.auto_pad, p.pads, {g.H, g.W}, p.kernel, p.stride, p.dilation);
  const int64_t in[2] = {g.H, g.W};
  int64_t out[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t ek = (p.kernel[i] - 1) * p.dilation[i] + 1;
    const int64_t span = in[i] + g.pads[i] + g.pads[i + 2] - ek;
    if (span < 0)
      throw_error(ErrorKind::bad_input, std::string(op) + " window larger than the padded input " + shape_to_string(xs));
    if (p.ceil_mode && p.auto_pad == "NOTSET") {
      out[i] = (span + p.stride[i] - 1) / p.stride[i] + 1;
      if ((out[i] - 1) * p.stride[i] >= in[i] + g.pads[i]) --out[i];  // last window must start inside
    } else {
      out[i] = span / p.stride[i] + 1;
    }
  }
  g.OH = out[0];
  g.OW = out[1];
  return g;
}

// Calls fn(pixel) for each tap of the window starting at (h0, w0) (padded coordinates already
// subtracted) that lies inside the input; pixel = h * W + w within the image.
template <class Fn>
inline void for_each_tap(const Geometry& g, const Pool2dParams& p, int64_t h0, int64_t w0, Fn fn) {
  for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
    const int64_t h = h0 + kh * p.dilation[0];
    if (h < 0 || h >= g.H) continue;
    for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
      const int64_t w = w0 + kw * p.dilation[1];
      if (w >= 0 && w < g.W) fn(h * g.W + w);
    }
  }
}

}  // namespace

Tensor maxpool_forward(const Tensor& x_in, const Pool2dParams& p, MaxPoolSaved* saved) {
  const Geometry g = geometry(x_in.shape(), p, "MaxPool");
  const Tensor x = to_layout(x_in, Layout::nhwc);
  Tensor y({g.N, g.C, g.OH, g.OW}, Layout::nhwc);
  if (saved) saved->argmax.assign(static_cast<size_t>(y.numel()), -1);
  const float* xp = x.data();
  float* yp = y.data();
  const int64_t C = g.C;
#pragma omp parallel for collapse(2) if (y.numel() > 8192)
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        float* out = yp + ((n * g.OH + oh) * g.OW + ow) * C;
        int32_t* arg = saved ? saved->argmax.data() + ((n * g.OH + oh) * g.OW + ow) * C : nullptr;
        std::fill(out, out + C, -std::numeric_limits<float>::infinity());
        bool first = true;
        for_each_tap(g, p, oh * p.stride[0] - g.pads[0], ow * p.stride[1] - g.pads[1], [&](int64_t pix) {
          const float* in = xp + (n * g.H * g.W + pix) * C;
          const int32_t off = static_cast<int32_t>(pix);
          if (!arg) {
            for (int64_t c = 0; c < C; ++c) out[c] = std::max(out[c], in[c]);
          } else if (first) {  // the first tap initialises the window (branch-free selects after it)
            for (int64_t c = 0; c < C; ++c) {
              out[c] = in[c];
              arg[c] = off;
            }
          } else {
            for (int64_t c = 0; c < C; ++c) {
              const float v = in[c];
              const bool gt = v > out[c];
              out[c] = gt ? v : out[c];
              arg[c] = gt ? off : arg[c];
            }
          }
          first = false;
        });
      }
    }
  return y;
}

Tensor maxpool_backward(const Shape& xs, const MaxPoolSaved& saved, const Tensor& gy_in) {
  const Tensor gy = to_layout(gy_in, Layout::nhwc);
  const int64_t N = xs[0], C = xs[1], HW = xs[2] * xs[3];
  const int64_t per_image = gy.numel() / std::max<int64_t>(N, 1);
  Tensor gx = Tensor::zeros(xs, Layout::nhwc);
  float* gxp = gx.data();
  const float* g = gy.data();
  const int32_t* arg = saved.argmax.data();
#pragma omp parallel for if (gy.numel() > 8192)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < per_image; ++i) {
      const int64_t k = n * per_image + i;
      const int64_t c = i % C;
      if (arg[k] >= 0) gxp[(n * HW + arg[k]) * C + c] += g[k];
    }
  }
  return gx;
}

namespace {
// Divisor of the window starting at (h0, w0) (padded coordinates already subtracted).
inline int64_t window_count(const Geometry& g, const Pool2dParams& p, int64_t h0, int64_t w0) {
  const int64_t eh = (p.kernel[0] - 1) * p.dilation[0] + 1, ew = (p.kernel[1] - 1) * p.dilation[1] + 1;
  if (p.count_include_pad) {
    const int64_t hend = std::min(h0 + eh, g.H + g.pads[2]), wend = std::min(w0 + ew, g.W + g.pads[3]);
    const int64_t hs = (hend - h0 + p.dilation[0] - 1) / p.dilation[0];
    const int64_t ws = (wend - w0 + p.dilation[1] - 1) / p.dilation[1];
    return hs * ws;
  }
  int64_t hs = 0, ws = 0;
  for (int64_t k = 0; k < p.kernel[0]; ++k) hs += (h0 + k * p.dilation[0] >= 0 && h0 + k * p.dilation[0] < g.H);
  for (int64_t k = 0; k < p.kernel[1]; ++k) ws += (w0 + k * p.dilation[1] >= 0 && w0 + k * p.dilation[1] < g.W);
  return hs * ws;
}
}  // namespace

Tensor avgpool_forward(const Tensor& x_in, const Pool2dParams& p) {
  const Geometry g = geometry(x_in.shape(), p, "AveragePool");
  const Tensor x = to_layout(x_in, Layout::nhwc);
  Tensor y({g.N, g.C, g.OH, g.OW}, Layout::nhwc);
  const float* xp = x.data();
  float* yp = y.data();
  const int64_t C = g.C;
#pragma omp parallel for collapse(2) if (y.numel() > 8192)
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        float* out = yp + ((n * g.OH + oh) * g.OW + ow) * C;
        std::fill(out, out + C, 0.0f);
        const int64_t h0 = oh * p.stride[0] - g.pads[0], w0 = ow * p.stride[1] - g.pads[1];
        for_each_tap(g, p, h0, w0, [&](int64_t pix) {
          const float* in = xp + (n * g.H * g.W + pix) * C;
          for (int64_t c = 0; c < C; ++c) out[c] += in[c];
        });
        const int64_t cnt = window_count(g, p, h0, w0);
        const float inv = cnt > 0 ? 1.0f / static_cast<float>(cnt) : 0.0f;
        for (int64_t c = 0; c < C; ++c) out[c] *= inv;
      }
  return y;
}

Tensor avgpool_backward(const Shape& xs, const Pool2dParams& p, const Tensor& gy_in) {
  const Geometry g = geometry(xs, p, "AveragePool");
  const Tensor gy = to_layout(gy_in, Layout::nhwc);
  Tensor gx = Tensor::zeros(xs, Layout::nhwc);
  float* gxp = gx.data();
  const float* gp = gy.data();
  const int64_t C = g.C;
#pragma omp parallel for if (gy.numel() > 8192)
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const float* go = gp + ((n * g.OH + oh) * g.OW + ow) * C;
        const int64_t h0 = oh * p.stride[0] - g.pads[0], w0 = ow * p.stride[1] - g.pads[1];
        const int64_t cnt = window_count(g, p, h0, w0);
        const float inv = cnt > 0 ? 1.0f / static_cast<float>(cnt) : 0.0f;
        for_each_tap(g, p, h0, w0, [&](int64_t pix) {
          float* gi = gxp + (n * g.H * g.W + pix) * C;
          for (int64_t c = 0; c < C; ++c) gi[c] += go[c] * inv;
        });
      }
  return gx;
}

Tensor global_avgpool_forward(const Tensor& x) {
  if (x.rank() < 3) throw_error(ErrorKind::bad_input, "GlobalAveragePool of a " + std::to_string(x.rank()) + "-D input");
  const int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  Shape ys(x.shape().size(), 1);
  ys[0] = N;
  ys[1] = C;
  Tensor y = Tensor::zeros(ys);  // [N, C, 1, 1]: plain and nhwc are the same bytes
  float* yp = y.data();
  const float* xp = x.data();
  const float inv = S ? 1.0f / static_cast<float>(S) : 0.0f;
  if (x.layout() == Layout::nhwc) {
#pragma omp parallel for if (x.numel() > 16384)
    for (int64_t n = 0; n < N; ++n) {
      float* out = yp + n * C;
      for (int64_t s = 0; s < S; ++s) {
        const float* in = xp + (n * S + s) * C;
        for (int64_t c = 0; c < C; ++c) out[c] += in[c];
      }
      for (int64_t c = 0; c < C; ++c) out[c] *= inv;
    }
  } else {
#pragma omp parallel for if (x.numel() > 16384)
    for (int64_t nc = 0; nc < N * C; ++nc) {
      double acc = 0;
      for (int64_t s = 0; s < S; ++s) acc += xp[nc * S + s];
      yp[nc] = static_cast<float>(acc) * inv;
    }
  }
  return y;
}

Tensor global_avgpool_backward(const Tensor& x, const Tensor& gy) {
  const int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  Tensor gx(x.shape(), x.layout());
  float* gp = gx.data();
  const float* g = gy.data();  // [N, C, 1, 1]
  const float inv = S ? 1.0f / static_cast<float>(S) : 0.0f;
  if (gx.layout() == Layout::nhwc) {
#pragma omp parallel for if (x.numel() > 16384)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t c = 0; c < C; ++c) gp[(n * S + s) * C + c] = g[n * C + c] * inv;
  } else {
#pragma omp parallel for if (x.numel() > 16384)
    for (int64_t nc = 0; nc < N * C; ++nc)
      for (int64_t s = 0; s < S; ++s) gp[nc * S + s] = g[nc] * inv;
  }
  return gx;
}

}  // namespace hpcnn::ops::cpu
