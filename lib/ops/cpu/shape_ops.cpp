#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/cpu/kernels.h"

namespace hpcnn::ops::cpu {

namespace {
int64_t norm_axis(int64_t axis, int rank, const char* op) {
  if (axis < -rank || axis >= rank)
    throw_error(ErrorKind::bad_input,
                std::string(op) + " axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}
// A concatenation as [outer, axis * inner] rows; the nhwc channel concat is outer = N*H*W, inner = 1.
struct ConcatView {
  int64_t outer = 1, inner = 1;
};
ConcatView concat_view(const Shape& out, int64_t axis, bool nhwc) {
  ConcatView v;
  if (nhwc) {
    v.outer = out[0] * out[2] * out[3];
    return v;
  }
  for (int64_t d = 0; d < axis; ++d) v.outer *= out[d];
  for (size_t d = static_cast<size_t>(axis) + 1; d < out.size(); ++d) v.inner *= out[d];
  return v;
}
}  // namespace

Tensor concat_forward(const std::vector<Tensor>& xs, int64_t axis_in) {
  if (xs.empty()) throw_error(ErrorKind::bad_input, "Concat without inputs");
  const int rank = xs[0].rank();
  const int64_t axis = norm_axis(axis_in, rank, "Concat");
  bool nhwc = rank == 4 && axis == 1;
  for (const Tensor& x : xs) nhwc = nhwc && x.layout() == Layout::nhwc;
  Shape out = xs[0].shape();
  out[axis] = 0;
  for (const Tensor& x : xs) {
    if (x.rank() != rank) throw_error(ErrorKind::bad_input, "Concat inputs of different ranks");
    for (int d = 0; d < rank; ++d)
      if (d != axis && x.dim(d) != out[d])
        throw_error(ErrorKind::bad_input,
                    "Concat input " + shape_to_string(x.shape()) + " does not match " + shape_to_string(xs[0].shape()));
    out[axis] += x.dim(static_cast<int>(axis));
  }
  const auto [outer, inner] = concat_view(out, axis, nhwc);
  Tensor y(out, nhwc ? Layout::nhwc : Layout::plain);
  const int64_t row = out[axis] * inner;
  int64_t col = 0;
  for (const Tensor& x0 : xs) {
    const Tensor x = nhwc ? x0 : to_layout(x0, Layout::plain);
    const int64_t w = x.dim(static_cast<int>(axis)) * inner;
    for (int64_t o = 0; o < outer; ++o) std::memcpy(y.data() + o * row + col, x.data() + o * w, w * sizeof(float));
    col += w;
  }
  return y;
}

std::vector<Tensor> concat_backward(const std::vector<Shape>& shapes, int64_t axis_in, const Tensor& gy) {
  const int rank = gy.rank();
  const int64_t axis = norm_axis(axis_in, rank, "Concat");
  const bool nhwc = gy.layout() == Layout::nhwc && axis == 1;
  const Tensor g = nhwc ? gy : to_layout(gy, Layout::plain);
  const auto [outer, inner] = concat_view(g.shape(), axis, nhwc);
  const int64_t row = g.dim(static_cast<int>(axis)) * inner;
  std::vector<Tensor> out;
  int64_t col = 0;
  for (const Shape& s : shapes) {
    Tensor x(s, nhwc ? Layout::nhwc : Layout::plain);
    const int64_t w = s[axis] * inner;
    for (int64_t o = 0; o < outer; ++o) std::memcpy(x.data() + o * w, g.data() + o * row + col, w * sizeof(float));
    col += w;
    out.push_back(std::move(x));
  }
  return out;
}

namespace {
// Softmax as [outer, n, inner] with the reduction over n.
struct SoftmaxView {
  int64_t outer, n, inner;
};
SoftmaxView softmax_view(const Shape& s, int64_t axis_in, bool legacy) {
  const int rank = static_cast<int>(s.size());
  const int64_t axis = norm_axis(axis_in, std::max(rank, 1), "Softmax");
  SoftmaxView v{1, 1, 1};
  if (rank == 0) return v;
  for (int d = 0; d < axis; ++d) v.outer *= s[d];
  if (legacy) {
    for (int d = static_cast<int>(axis); d < rank; ++d) v.n *= s[d];
  } else {
    v.n = s[axis];
    for (int d = static_cast<int>(axis) + 1; d < rank; ++d) v.inner *= s[d];
  }
  return v;
}
}  // namespace

Tensor softmax_forward(const Tensor& x_in, int64_t axis, bool legacy) {
  const Tensor x = to_layout(x_in, Layout::plain);
  const SoftmaxView v = softmax_view(x.shape(), axis, legacy);
  Tensor y(x.shape());
#pragma omp parallel for collapse(2) if (x.numel() > 65536)
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t i = 0; i < v.inner; ++i) {
      const float* in = x.data() + o * v.n * v.inner + i;
      float* out = y.data() + o * v.n * v.inner + i;
      float mx = -INFINITY;
      for (int64_t k = 0; k < v.n; ++k) mx = std::max(mx, in[k * v.inner]);
      double sum = 0;
      for (int64_t k = 0; k < v.n; ++k) {
        out[k * v.inner] = std::exp(in[k * v.inner] - mx);
        sum += out[k * v.inner];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t k = 0; k < v.n; ++k) out[k * v.inner] *= inv;
    }
  return y;
}

Tensor softmax_backward(const Tensor& y, const Tensor& gy_in, int64_t axis, bool legacy) {
  const Tensor gy = to_layout(gy_in, Layout::plain);
  const SoftmaxView v = softmax_view(y.shape(), axis, legacy);
  Tensor gx(y.shape());
#pragma omp parallel for collapse(2) if (y.numel() > 65536)
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t i = 0; i < v.inner; ++i) {
      const int64_t base = o * v.n * v.inner + i;
      double dot = 0;
      for (int64_t k = 0; k < v.n; ++k) dot += static_cast<double>(gy.data()[base + k * v.inner]) * y.data()[base + k * v.inner];
      for (int64_t k = 0; k < v.n; ++k) {
        const int64_t j = base + k * v.inner;
        gx.data()[j] = y.data()[j] * (gy.data()[j] - static_cast<float>(dot));
      }
    }
  return gx;
}

}  // namespace hpcnn::ops::cpu

namespace hpcnn::ops::cpu {

Tensor transpose_forward(const Tensor& x_in, const std::vector<int64_t>& perm_in) {
  const Tensor x = to_layout(x_in, Layout::plain);
  const int r = x.rank();
  std::vector<int64_t> perm = perm_in;
  if (perm.empty())
    for (int i = r - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int>(perm.size()) != r)
    throw_error(ErrorKind::bad_input,
                "Transpose perm of length " + std::to_string(perm.size()) + " for rank " + std::to_string(r));
  std::vector<bool> seen(static_cast<size_t>(r), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= r || seen[static_cast<size_t>(p)]) throw_error(ErrorKind::bad_input, "Transpose perm is not a permutation");
    seen[static_cast<size_t>(p)] = true;
  }
  Shape out(static_cast<size_t>(r));
  std::vector<int64_t> in_stride(static_cast<size_t>(r), 1);
  for (int d = r - 2; d >= 0; --d) in_stride[d] = in_stride[d + 1] * x.dim(d + 1);
  std::vector<int64_t> st(static_cast<size_t>(r));
  for (int d = 0; d < r; ++d) {
    out[d] = x.dim(static_cast<int>(perm[d]));
    st[d] = in_stride[static_cast<size_t>(perm[d])];
  }
  Tensor y(out);
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t off = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    y.data()[i] = x.data()[off];
    for (int d = r - 1; d >= 0; --d) {
      ++idx[d];
      off += st[d];
      if (idx[d] < out[d]) break;
      off -= st[d] * out[d];
      idx[d] = 0;
    }
  }
  return y;
}

namespace {
// Calls fn(x_offset, y_offset, run) for each innermost row of x inside the padded y.
template <class Fn>
void for_each_pad_row(const Shape& xs, const std::vector<int64_t>& pads, const Shape& ys, Fn fn) {
  const int r = static_cast<int>(xs.size());
  if (r == 0 || shape_numel(xs) == 0) {
    if (r == 0) fn(0, 0, 1);
    return;
  }
  std::vector<int64_t> ystride(static_cast<size_t>(r), 1);
  for (int d = r - 2; d >= 0; --d) ystride[d] = ystride[d + 1] * ys[d + 1];
  const int64_t inner = xs[r - 1];
  const int64_t rows = shape_numel(xs) / inner;
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t yoff = 0;
    for (int d = 0; d < r; ++d) yoff += (idx[d] + pads[d]) * ystride[d];
    fn(row * inner, yoff, inner);
    for (int d = r - 2; d >= 0; --d) {
      if (++idx[d] < xs[d]) break;
      idx[d] = 0;
    }
  }
}
}  // namespace

Tensor pad_forward(const Tensor& x_in, const std::vector<int64_t>& pads, float value) {
  const Tensor x = to_layout(x_in, Layout::plain);
  const int r = x.rank();
  if (static_cast<int>(pads.size()) != 2 * r)
    throw_error(ErrorKind::bad_input, "Pad with " + std::to_string(pads.size()) + " pads for rank " + std::to_string(r));
  Shape ys = x.shape();
  for (int d = 0; d < r; ++d) {
    if (pads[d] < 0 || pads[d + r] < 0) throw_error(ErrorKind::unsupported, "Pad with negative pads (cropping)");
    ys[d] += pads[d] + pads[d + r];
  }
  Tensor y = Tensor::full(ys, value);
  for_each_pad_row(x.shape(), pads, ys, [&](int64_t xo, int64_t yo, int64_t n) {
    std::memcpy(y.data() + yo, x.data() + xo, static_cast<size_t>(n) * sizeof(float));
  });
  return y;
}

Tensor pad_backward(const Shape& xs, const std::vector<int64_t>& pads, const Tensor& gy_in) {
  const Tensor gy = to_layout(gy_in, Layout::plain);
  Tensor gx(xs);
  for_each_pad_row(xs, pads, gy.shape(), [&](int64_t xo, int64_t yo, int64_t n) {
    std::memcpy(gx.data() + xo, gy.data() + yo, static_cast<size_t>(n) * sizeof(float));
  });
  return gx;
}

}  // namespace hpcnn::ops::cpu
