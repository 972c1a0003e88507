// The CPU twin of ops/sparse_fcl.h: two oneDNN sgemm calls forward, four backward, on
// channels-last activations.
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
  if (x.rank() != 4) throw_error(ErrorKind::bad_input, "sparse FCL input must be [N, C, H, W], got " + shape_to_string(x.shape()));
  Dims d{x.dim(0), x.dim(1), x.dim(2) * x.dim(3), A.rank() >= 1 ? A.dim(0) : 0, B.rank() == 2 ? B.dim(0) : 0};
  if (A.numel() != d.r * d.C || (A.rank() != 2 && A.rank() != 4))
    throw_error(ErrorKind::bad_input, "sparse FCL reduction weight " + shape_to_string(A.shape()) + " does not match " +
                                          std::to_string(d.C) + " input channels");
  if (B.rank() != 2 || B.dim(1) != d.r * d.HW)
    throw_error(ErrorKind::bad_input, "sparse FCL weight " + shape_to_string(B.shape()) + " does not take " + std::to_string(d.r) +
                                          " x " + std::to_string(d.HW) + " reduced features");
  return d;
}

// Bp[o, s*r + k] = B[o, k*HW + s] (and back with inverse).
std::vector<float> position_major(const float* B, const Dims& d, bool inverse) {
  std::vector<float> out(static_cast<size_t>(d.O * d.r * d.HW));
  for (int64_t o = 0; o < d.O; ++o)
    for (int64_t k = 0; k < d.r; ++k)
      for (int64_t s = 0; s < d.HW; ++s) {
        const int64_t channel_major = o * d.r * d.HW + k * d.HW + s, pos_major = o * d.r * d.HW + s * d.r + k;
        out[static_cast<size_t>(inverse ? channel_major : pos_major)] = B[inverse ? pos_major : channel_major];
      }
  return out;
}

}  // namespace

Tensor sparse_fcl_forward(const Tensor& x_in, const Tensor& A, const Tensor& a, const Tensor& B, const Tensor& b,
                          SparseFclSaved* saved) {
  const Dims d = check(x_in, A, B);
  const Tensor x = to_layout(x_in, Layout::nhwc);
  Tensor z({d.N * d.HW, d.r});
  sgemm(false, true, d.N * d.HW, d.r, d.C, 1.0f, x.data(), d.C, A.data(), d.C, 0.0f, z.data(), d.r);
  if (a.defined()) {
    if (a.numel() != d.r) throw_error(ErrorKind::bad_input, "sparse FCL reduction bias has " + std::to_string(a.numel()) + " values, not " + std::to_string(d.r));
    float* zp = z.data();
    for (int64_t i = 0; i < d.N * d.HW; ++i)
      for (int64_t k = 0; k < d.r; ++k) zp[i * d.r + k] += a.data()[k];
  }
  const std::vector<float> Bp = position_major(B.data(), d, false);
  Tensor y({d.N, d.O});
  sgemm(false, true, d.N, d.O, d.HW * d.r, 1.0f, z.data(), d.HW * d.r, Bp.data(), d.HW * d.r, 0.0f, y.data(), d.O);
  if (b.defined()) {
    if (b.numel() != d.O) throw_error(ErrorKind::bad_input, "sparse FCL bias has " + std::to_string(b.numel()) + " values, not " + std::to_string(d.O));
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t o = 0; o < d.O; ++o) y.data()[n * d.O + o] += b.data()[o];
  }
  if (saved) saved->z = z;
  return y;
}

void sparse_fcl_backward(const Tensor& x_in, const Tensor& A, const Tensor& B, const SparseFclSaved& saved, const Tensor& gy_in,
                         Tensor* gx, Tensor* gA, Tensor* ga, Tensor* gB, Tensor* gb) {
  const Dims d = check(x_in, A, B);
  const Tensor gy = to_layout(gy_in, Layout::plain);
  const int64_t F = d.HW * d.r, P = d.N * d.HW;
  if (gB) {
    std::vector<float> gBp(static_cast<size_t>(d.O * F));
    sgemm(true, false, d.O, F, d.N, 1.0f, gy.data(), d.O, saved.z.data(), F, 0.0f, gBp.data(), F);
    *gB = Tensor(B.shape());
    const std::vector<float> cm = position_major(gBp.data(), d, true);
    std::memcpy(gB->data(), cm.data(), cm.size() * sizeof(float));
  }
  if (gb) {
    *gb = Tensor::zeros({d.O});
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t o = 0; o < d.O; ++o) gb->data()[o] += gy.data()[n * d.O + o];
  }
  if (!gx && !gA && !ga) return;
  const std::vector<float> Bp = position_major(B.data(), d, false);
  Tensor gz({P, d.r});
  sgemm(false, false, d.N, F, d.O, 1.0f, gy.data(), d.O, Bp.data(), F, 0.0f, gz.data(), F);
  if (ga) {
    std::vector<double> s(static_cast<size_t>(d.r), 0.0);
    for (int64_t i = 0; i < P; ++i)
      for (int64_t k = 0; k < d.r; ++k) s[static_cast<size_t>(k)] += gz.data()[i * d.r + k];
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
