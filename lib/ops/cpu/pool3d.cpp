// 3-D pooling on the CPU in plain NCDHW: each (n, c) volume is pooled on its own (OpenMP over
// the volumes), windows clipped to the input per axis.
#include <algorithm>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ops/conv.h"
#include "ops/cpu/kernels.h"

namespace hpcnn::ops::cpu {

namespace {

struct Geometry {
  int64_t N, C;
  std::array<int64_t, 3> in, out;
  std::array<int64_t, 6> pads;
  int64_t in_volume() const { return in[0] * in[1] * in[2]; }
  int64_t out_volume() const { return out[0] * out[1] * out[2]; }
};

Geometry geometry(const Shape& xs, const Pool3dParams& p, const char* op) {
  if (xs.size() != 5)
    throw_error(ErrorKind::unsupported,
                std::string(op) + " with 3 spatial dims of a " + std::to_string(xs.size()) + "-D input (needs [N, C, D, H, W])");
  Geometry g{xs[0], xs[1], {xs[2], xs[3], xs[4]}, {}, p.pads};
  if (g.in_volume() > std::numeric_limits<int32_t>::max())
    throw_error(ErrorKind::unsupported, std::string(op) + " of a volume over 2^31 elements " + shape_to_string(xs));
  g.pads = resolve_pads<3>(p.auto_pad, p.pads, g.in, p.kernel, p.stride, p.dilation);
  for (int i = 0; i < 3; ++i) {
    const int64_t ek = (p.kernel[i] - 1) * p.dilation[i] + 1;
    const int64_t span = g.in[i] + g.pads[i] + g.pads[i + 3] - ek;
    if (span < 0)
      throw_error(ErrorKind::bad_input, std::string(op) + " window larger than the padded input " + shape_to_string(xs));
    if (p.ceil_mode && p.auto_pad == "NOTSET") {
      g.out[i] = (span + p.stride[i] - 1) / p.stride[i] + 1;
      if ((g.out[i] - 1) * p.stride[i] >= g.in[i] + g.pads[i]) --g.out[i];  // last window must start inside
    } else {
      g.out[i] = span / p.stride[i] + 1;
    }
  }
  return g;
}

// The input positions of one axis that a window starting at `start` (padding subtracted) covers.
struct Taps {
  int64_t first = 0, count = 0, step = 1;  // positions first, first + step, ...
};

Taps taps(int64_t start, int64_t kernel, int64_t dilation, int64_t in) {
  Taps t{0, 0, dilation};
  int64_t k0 = 0;
  while (k0 < kernel && start + k0 * dilation < 0) ++k0;
  int64_t k1 = kernel;
  while (k1 > k0 && start + (k1 - 1) * dilation >= in) --k1;
  t.first = start + k0 * dilation;
  t.count = k1 - k0;
  return t;
}

// Calls fn(out_index, input offsets of the window's taps via each(fn2)) for every output voxel.
template <class Fn>
void for_each_window(const Geometry& g, const Pool3dParams& p, Fn fn) {
  const int64_t H = g.in[1], W = g.in[2];
  int64_t o = 0;
  for (int64_t od = 0; od < g.out[0]; ++od) {
    const Taps td = taps(od * p.stride[0] - g.pads[0], p.kernel[0], p.dilation[0], g.in[0]);
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
      const Taps th = taps(oh * p.stride[1] - g.pads[1], p.kernel[1], p.dilation[1], g.in[1]);
      for (int64_t ow = 0; ow < g.out[2]; ++ow, ++o) {
        const Taps tw = taps(ow * p.stride[2] - g.pads[2], p.kernel[2], p.dilation[2], g.in[2]);
        auto each = [&](auto visit) {
          for (int64_t a = 0, d = td.first; a < td.count; ++a, d += td.step)
            for (int64_t b = 0, h = th.first; b < th.count; ++b, h += th.step)
              for (int64_t c = 0, w = tw.first; c < tw.count; ++c, w += tw.step) visit((d * H + h) * W + w);
        };
        fn(o, od, oh, ow, td.count * th.count * tw.count, each);
      }
    }
  }
}

// The divisor of AveragePool's window at output (od, oh, ow) with `inside` taps in the input.
int64_t window_count(const Geometry& g, const Pool3dParams& p, int64_t od, int64_t oh, int64_t ow, int64_t inside) {
  if (!p.count_include_pad) return inside;
  const int64_t o[3] = {od, oh, ow};
  int64_t n = 1;
  for (int i = 0; i < 3; ++i) {  // taps inside the padded input (ONNX: pads count, the ceil_mode overhang does not)
    const int64_t start = o[i] * p.stride[i] - g.pads[i];
    const int64_t end = std::min(start + (p.kernel[i] - 1) * p.dilation[i] + 1, g.in[i] + g.pads[i + 3]);
    n *= (end - start + p.dilation[i] - 1) / p.dilation[i];
  }
  return n;
}

// True when no window needs clipping: no padding, no dilation, every window inside the input (the
// usual kernel = stride pooling of 3-D CNNs, CosmoFlow's MaxPool 2 / stride 2 among them).
bool windows_inside(const Geometry& g, const Pool3dParams& p) {
  for (int i = 0; i < 3; ++i)
    if (g.pads[i] || g.pads[i + 3] || p.dilation[i] != 1 || (g.out[i] - 1) * p.stride[i] + p.kernel[i] > g.in[i]) return false;
  return true;
}

// MaxPool over windows that windows_inside accepts, without the clipping walk of for_each_window:
// the same taps in the same order (D, then H, then W), so the same maximum and the same argmax
// (the first maximal element wins). `arg` may be null (inference).
void maxpool3d_inside(const Geometry& g, const Pool3dParams& p, const float* xp, float* yp, int32_t* arg) {
  const int64_t H = g.in[1], W = g.in[2], iv = g.in_volume(), ov = g.out_volume();
  std::vector<int64_t> taps;  // a window's offsets from its first tap, in D, H, W order
  for (int64_t a = 0; a < p.kernel[0]; ++a)
    for (int64_t b = 0; b < p.kernel[1]; ++b)
      for (int64_t c = 0; c < p.kernel[2]; ++c) taps.push_back((a * H + b) * W + c);
  const int64_t planes = g.N * g.C;
#pragma omp parallel for if (planes * ov > 8192)
  for (int64_t pl = 0; pl < planes; ++pl) {
    const float* in = xp + pl * iv;
    float* out = yp + pl * ov;
    int32_t* am = arg ? arg + pl * ov : nullptr;
    int64_t o = 0;
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh)
        for (int64_t ow = 0; ow < g.out[2]; ++ow, ++o) {
          const int64_t base = (od * p.stride[0] * H + oh * p.stride[1]) * W + ow * p.stride[2];
          float best = in[base];
          int64_t at = base;
          for (size_t t = 1; t < taps.size(); ++t)
            if (in[base + taps[t]] > best) {
              best = in[base + taps[t]];
              at = base + taps[t];
            }
          out[o] = best;
          if (am) am[o] = static_cast<int32_t>(at);
        }
  }
}

}  // namespace

Tensor maxpool3d_forward(const Tensor& x_in, const Pool3dParams& p, MaxPoolSaved* saved) {
  const Geometry g = geometry(x_in.shape(), p, "MaxPool");
  const Tensor x = to_layout(x_in, Layout::plain);
  Tensor y({g.N, g.C, g.out[0], g.out[1], g.out[2]});
  const int64_t planes = g.N * g.C, iv = g.in_volume(), ov = g.out_volume();
  if (saved) saved->argmax.assign(static_cast<size_t>(y.numel()), -1);
  const float* xp = x.data();
  float* yp = y.data();
  int32_t* arg = saved ? saved->argmax.data() : nullptr;
  if (windows_inside(g, p)) {
    maxpool3d_inside(g, p, xp, yp, arg);
    return y;
  }
#pragma omp parallel for if (y.numel() > 8192)
  for (int64_t pl = 0; pl < planes; ++pl) {
    const float* in = xp + pl * iv;
    for_each_window(g, p, [&](int64_t o, int64_t, int64_t, int64_t, int64_t, auto each) {
      float best = -std::numeric_limits<float>::infinity();
      int64_t at = -1;
      each([&](int64_t i) {
        if (at < 0 || in[i] > best) {  // the first maximal element wins
          best = in[i];
          at = i;
        }
      });
      yp[pl * ov + o] = best;
      if (arg) arg[pl * ov + o] = static_cast<int32_t>(at);
    });
  }
  return y;
}

Tensor maxpool3d_backward(const Shape& xs, const MaxPoolSaved& saved, const Tensor& gy_in) {
  if (xs.size() != 5) throw_error(ErrorKind::bad_input, "3-D MaxPool backward for a " + std::to_string(xs.size()) + "-D input");
  const Tensor gy = to_layout(gy_in, Layout::plain);
  if (static_cast<int64_t>(saved.argmax.size()) != gy.numel())
    throw_error(ErrorKind::usage, "MaxPool backward without the forward's argmax of this shape");
  const int64_t planes = xs[0] * xs[1], iv = xs[2] * xs[3] * xs[4];
  const int64_t ov = gy.numel() / std::max<int64_t>(planes, 1);
  Tensor gx = Tensor::zeros(xs);
  float* gxp = gx.data();
  const float* g = gy.data();
  const int32_t* arg = saved.argmax.data();
#pragma omp parallel for if (gy.numel() > 8192)
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t o = 0; o < ov; ++o) {
      const int64_t k = pl * ov + o;
      if (arg[k] >= 0) gxp[pl * iv + arg[k]] += g[k];
    }
  return gx;
}

Tensor avgpool3d_forward(const Tensor& x_in, const Pool3dParams& p) {
  const Geometry g = geometry(x_in.shape(), p, "AveragePool");
  const Tensor x = to_layout(x_in, Layout::plain);
  Tensor y({g.N, g.C, g.out[0], g.out[1], g.out[2]});
  const int64_t planes = g.N * g.C, iv = g.in_volume(), ov = g.out_volume();
  const float* xp = x.data();
  float* yp = y.data();
#pragma omp parallel for if (y.numel() > 8192)
  for (int64_t pl = 0; pl < planes; ++pl) {
    const float* in = xp + pl * iv;
    for_each_window(g, p, [&](int64_t o, int64_t od, int64_t oh, int64_t ow, int64_t inside, auto each) {
      float sum = 0.0f;
      each([&](int64_t i) { sum += in[i]; });
      const int64_t cnt = window_count(g, p, od, oh, ow, inside);
      yp[pl * ov + o] = cnt > 0 ? sum / static_cast<float>(cnt) : 0.0f;
    });
  }
  return y;
}

Tensor avgpool3d_backward(const Shape& xs, const Pool3dParams& p, const Tensor& gy_in) {
  const Geometry g = geometry(xs, p, "AveragePool");
  const Tensor gy = to_layout(gy_in, Layout::plain);
  const int64_t planes = g.N * g.C, iv = g.in_volume(), ov = g.out_volume();
  if (gy.numel() != planes * ov)
    throw_error(ErrorKind::bad_input, "AveragePool output gradient of shape " + shape_to_string(gy.shape()));
  Tensor gx = Tensor::zeros(xs);
  float* gxp = gx.data();
  const float* gp = gy.data();
#pragma omp parallel for if (gy.numel() > 8192)
  for (int64_t pl = 0; pl < planes; ++pl) {
    float* out = gxp + pl * iv;
    for_each_window(g, p, [&](int64_t o, int64_t od, int64_t oh, int64_t ow, int64_t inside, auto each) {
      const int64_t cnt = window_count(g, p, od, oh, ow, inside);
      const float v = cnt > 0 ? gp[pl * ov + o] / static_cast<float>(cnt) : 0.0f;
      each([&](int64_t i) { out[i] += v; });
    });
  }
  return gx;
}

}  // namespace hpcnn::ops::cpu
