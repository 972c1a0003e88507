// The CPU twin of ops/sparse_fcl.h: two oneDNN sgemm calls forward, four backward, on
// channels-last activations, with the reduced activations transposed between the two GEMMs.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/cpu/dnnl_util.h"
#include "ops/cpu/kernels.h"

namespace hpcnn::ops::cpu {
namespace {

struct Dims {
  int64_t N, C, HW, r, O;
};

Dims check(const Tensor& x, const Tensor& A, const Tensor& B) {
  if (x.rank() != 4)
    throw_error(ErrorKind::bad_input, "sparse FCL input must be [N, C, H, W], got " + shape_to_string(x.shape()));
  Dims d{x.dim(0), x.dim(1), x.dim(2) * x.dim(3), A.rank() >= 1 ? A.dim(0) : 0, B.rank() == 2 ? B.dim(0) : 0};
  if (A.numel() != d.r * d.C || (A.rank() != 2 && A.rank() != 4))
    throw_error(ErrorKind::bad_input, "sparse FCL reduction weight " + shape_to_string(A.shape()) + " does not match " +
                                          std::to_string(d.C) + " input channels");
  if (B.rank() != 2 || B.dim(1) != d.r * d.HW)
    throw_error(ErrorKind::bad_input, "sparse FCL weight " + shape_to_string(B.shape()) + " does not take " +
                                          std::to_string(d.r) + " x " + std::to_string(d.HW) + " reduced features");
  return d;
}

// zc[n, k*HW + s] = z[n*HW + s, k] (the FC's input in ONNX Flatten order), or back with inverse.
// Transposing the small reduced activations (N*HW*r values) lets both GEMMs of the FC read B as
// it is stored, instead of permuting its O*r*HW columns on every call.
void channel_major(const float* from, float* to, const Dims& d, bool inverse) {
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t s = 0; s < d.HW; ++s)
      for (int64_t k = 0; k < d.r; ++k) {
        const int64_t pos = (n * d.HW + s) * d.r + k, cm = n * d.r * d.HW + k * d.HW + s;
        to[inverse ? pos : cm] = from[inverse ? cm : pos];
      }
}

}  // namespace

Tensor sparse_fcl_forward(const Tensor& x_in, const Tensor& A, const Tensor& a, const Tensor& B, const Tensor& b,
                          SparseFclSaved* saved) {
  const Dims d = check(x_in, A, B);
  const Tensor x = to_layout(x_in, Layout::nhwc);
  Tensor z({d.N * d.HW, d.r});
  sgemm(false, true, d.N * d.HW, d.r, d.C, 1.0f, x.data(), d.C, A.data(), d.C, 0.0f, z.data(), d.r);
  if (a.defined()) {
    if (a.numel() != d.r)
      throw_error(ErrorKind::bad_input,
                  "sparse FCL reduction bias has " + std::to_string(a.numel()) + " values, not " + std::to_string(d.r));
    float* zp = z.data();
    const float* ap = a.data();
    for (int64_t i = 0; i < d.N * d.HW; ++i)
      for (int64_t k = 0; k < d.r; ++k) zp[i * d.r + k] += ap[k];
  }
  Tensor zc({d.N, d.r * d.HW});
  channel_major(z.data(), zc.data(), d, false);
  if (b.defined() && b.numel() != d.O)
    throw_error(ErrorKind::bad_input, "sparse FCL bias has " + std::to_string(b.numel()) + " values, not " + std::to_string(d.O));
  Tensor y({d.N, d.O});
  sgemm_fc(d.N, d.O, d.HW * d.r, 1.0f, zc.data(), B.data(), 0.0f, y.data());  // y = zc B^T
  if (b.defined()) {
    float* yp = y.data();
    const float* bp = b.data();
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t o = 0; o < d.O; ++o) yp[n * d.O + o] += bp[o];
  }
  if (saved) saved->z = zc;
  return y;
}

void sparse_fcl_backward(const Tensor& x_in, const Tensor& A, const Tensor& B, const SparseFclSaved& saved, const Tensor& gy_in,
                         Tensor* gx, Tensor* gA, Tensor* ga, Tensor* gB, Tensor* gb) {
  const Dims d = check(x_in, A, B);
  const Tensor gy = to_layout(gy_in, Layout::plain);
  const int64_t F = d.HW * d.r, P = d.N * d.HW;
  if (gB) {  // gB = gy^T zc, in B's (channel-major) layout directly
    *gB = Tensor(B.shape());
    sgemm(true, false, d.O, F, d.N, 1.0f, gy.data(), d.O, saved.z.data(), F, 0.0f, gB->data(), F);
  }
  if (gb) {
    *gb = Tensor::zeros({d.O});
    float* g = gb->data();
    const float* gyp = gy.data();
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t o = 0; o < d.O; ++o) g[o] += gyp[n * d.O + o];
  }
  if (!gx && !gA && !ga) return;
  std::vector<float> gzc(static_cast<size_t>(d.N * F));
  sgemm(false, false, d.N, F, d.O, 1.0f, gy.data(), d.O, B.data(), F, 0.0f, gzc.data(), F);
  Tensor gz({P, d.r});
  channel_major(gzc.data(), gz.data(), d, true);
  if (ga) {
    std::vector<double> s(static_cast<size_t>(d.r), 0.0);
    const float* g = gz.data();
    for (int64_t i = 0; i < P; ++i)
      for (int64_t k = 0; k < d.r; ++k) s[static_cast<size_t>(k)] += g[i * d.r + k];
    *ga = Tensor({d.r});
    for (int64_t k = 0; k < d.r; ++k) ga->data()[k] = static_cast<float>(s[static_cast<size_t>(k)]);
  }
  if (gA) {
    const Tensor x = to_layout(x_in, Layout::nhwc);
    *gA = Tensor(A.shape());
    sgemm(true, false, d.r, d.C, P, 1.0f, gz.data(), d.r, x.data(), d.C, 0.0f, gA->data(), d.C);
  }
  if (gx) {
    *gx = Tensor(x_in.shape(), Layout::nhwc);
    sgemm(false, false, P, d.C, d.r, 1.0f, gz.data(), d.r, A.data(), d.C, 0.0f, gx->data(), d.C);
  }
}

}  // namespace hpcnn::ops::cpu
