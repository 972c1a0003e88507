#include <algorithm>

#include "core/error.h"
#include "ops/cpu/kernels.h"

namespace hpcnn::ops::cpu {

namespace {

// Element strides of a plain tensor of shape `s` seen in broadcast shape `out` (0 where broadcast).
std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t stride = 1;
  for (int i = static_cast<int>(s.size()) - 1, j = static_cast<int>(out.size()) - 1; i >= 0; --i, --j) {
    st[j] = s[i] == 1 ? 0 : stride;
    stride *= s[i];
  }
  return st;
}

// Calls fn(out_offset, a_offset, b_offset, inner_count, a_inner_stride, b_inner_stride) over rows.
template <class Fn>
void for_each_row(const Shape& out, const std::vector<int64_t>& sa, const std::vector<int64_t>& sb, Fn fn) {
  const int r = static_cast<int>(out.size());
  if (r == 0) {
    fn(0, 0, 0, 1, 0, 0);
    return;
  }
  const int64_t inner = out[r - 1];
  const int64_t rows = shape_numel(out) / std::max<int64_t>(inner, 1);
  if (inner == 0) return;
  std::vector<int64_t> idx(r, 0);
  int64_t oa = 0, ob = 0;
  for (int64_t row = 0; row < rows; ++row) {
    fn(row * inner, oa, ob, inner, sa[r - 1], sb[r - 1]);
    for (int d = r - 2; d >= 0; --d) {
      ++idx[d];
      oa += sa[d];
      ob += sb[d];
      if (idx[d] < out[d]) break;
      oa -= sa[d] * out[d];
      ob -= sb[d] * out[d];
      idx[d] = 0;
    }
  }
}

inline float apply(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::add:
      return a + b;
    case BinaryOp::sub:
      return a - b;
    case BinaryOp::mul:
      return a * b;
  }
  return 0;
}

}  // namespace

Tensor binary_forward(BinaryOp op, const Tensor& a_in, const Tensor& b_in) {
  if (a_in.shape() == b_in.shape() && a_in.layout() == b_in.layout()) {
    Tensor y(a_in.shape(), a_in.layout());
    const float* a = a_in.data();
    const float* b = b_in.data();
    float* o = y.data();
    const int64_t n = y.numel();
    switch (op) {
      case BinaryOp::add:
#pragma omp parallel for simd if (n > 65536)
        for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
        break;
      case BinaryOp::sub:
#pragma omp parallel for simd if (n > 65536)
        for (int64_t i = 0; i < n; ++i) o[i] = a[i] - b[i];
        break;
      case BinaryOp::mul:
#pragma omp parallel for simd if (n > 65536)
        for (int64_t i = 0; i < n; ++i) o[i] = a[i] * b[i];
        break;
    }
    return y;
  }
  const Tensor a = to_layout(a_in, Layout::plain), b = to_layout(b_in, Layout::plain);
  const Shape out = broadcast_shape(a.shape(), b.shape());
  Tensor y(out);
  const auto sa = broadcast_strides(a.shape(), out), sb = broadcast_strides(b.shape(), out);
  const float* ap = a.data();
  const float* bp = b.data();
  float* yp = y.data();
  for_each_row(out, sa, sb, [&](int64_t o, int64_t ia, int64_t ib, int64_t n, int64_t da, int64_t db) {
    for (int64_t i = 0; i < n; ++i) yp[o + i] = apply(op, ap[ia + i * da], bp[ib + i * db]);
  });
  return y;
}

Tensor reduce_to_shape(const Tensor& g_in, const Shape& to) {
  if (g_in.shape() == to) return g_in;
  const Tensor g = to_layout(g_in, Layout::plain);
  Tensor r = Tensor::zeros(to);
  const auto st = broadcast_strides(to, g.shape());
  const std::vector<int64_t> zero(g.shape().size(), 0);
  const float* gp = g.data();
  float* rp = r.data();
  for_each_row(g.shape(), st, zero, [&](int64_t o, int64_t ir, int64_t, int64_t n, int64_t dr, int64_t) {
    for (int64_t i = 0; i < n; ++i) rp[ir + i * dr] += gp[o + i];
  });
  return r;
}

void add_sub_backward(BinaryOp op, const Shape& a, Layout la, const Shape& b, Layout lb, const Tensor& gy, Tensor* ga,
                      Tensor* gb) {
  const bool same = a == b && la == lb;
  const Tensor g = to_layout(gy, same ? la : Layout::plain);
  if (ga) *ga = cpu::reduce_to_shape(g, a);
  if (gb) {
    Tensor r = cpu::reduce_to_shape(g, b);
    if (op == BinaryOp::sub) {
      Tensor n(r.shape(), r.layout());
      for (int64_t i = 0; i < r.numel(); ++i) n.data()[i] = -r.data()[i];
      r = n;
    }
    *gb = r;
  }
}

void binary_backward(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& gy, Tensor* ga, Tensor* gb) {
  if (op != BinaryOp::mul) {
    cpu::add_sub_backward(op, a.shape(), a.layout(), b.shape(), b.layout(), gy, ga, gb);
    return;
  }
  const bool same = a.shape() == b.shape() && a.layout() == b.layout();
  const Tensor g = same ? to_layout(gy, a.layout()) : to_layout(gy, Layout::plain);
  if (ga) *ga = cpu::reduce_to_shape(cpu::binary_forward(BinaryOp::mul, g, same ? b : to_layout(b, Layout::plain)), a.shape());
  if (gb) *gb = cpu::reduce_to_shape(cpu::binary_forward(BinaryOp::mul, g, same ? a : to_layout(a, Layout::plain)), b.shape());
}

}  // namespace hpcnn::ops::cpu
