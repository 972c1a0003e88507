#include "core/error.h"
#include "ops/binary.h"
#include "ops/cpu/dnnl_util.h"
#include "ops/cpu/kernels.h"

namespace hpcnn::ops::cpu {

namespace {
void need_2d(const Tensor& t, const char* what) {
  if (t.rank() != 2)
    throw_error(ErrorKind::bad_input, std::string("Gemm ") + what + " of shape " + shape_to_string(t.shape()) + " is not 2-D");
}
}  // namespace

Tensor gemm_forward(const Tensor& A, const Tensor& B, const Tensor& C, const GemmParams& p) {
  need_2d(A, "A");
  need_2d(B, "B");
  const int64_t M = p.trans_a ? A.dim(1) : A.dim(0), K = p.trans_a ? A.dim(0) : A.dim(1);
  const int64_t KB = p.trans_b ? B.dim(1) : B.dim(0), N = p.trans_b ? B.dim(0) : B.dim(1);
  if (K != KB)
    throw_error(ErrorKind::bad_input,
                "Gemm inner dimensions differ: A " + shape_to_string(A.shape()) + ", B " + shape_to_string(B.shape()));
  Tensor Y;
  float beta = 0.0f;
  if (C.defined() && p.beta != 0.0f) {
    if (broadcast_shape(C.shape(), {M, N}) != Shape{M, N})
      throw_error(ErrorKind::bad_input, "Gemm C of shape " + shape_to_string(C.shape()) + " does not broadcast to [" +
                                            std::to_string(M) + "," + std::to_string(N) + "]");
    Y = cpu::binary_forward(BinaryOp::add, Tensor::zeros({M, N}), to_layout(C, Layout::plain));  // C broadcast to [M, N]
    beta = p.beta;
  } else {
    Y = Tensor({M, N});
  }
  if (!p.trans_a && p.trans_b)  // the FC layer's case
    cpu::sgemm_fc(M, N, K, p.alpha, A.data(), B.data(), beta, Y.data());
  else
    cpu::sgemm(p.trans_a, p.trans_b, M, N, K, p.alpha, A.data(), A.dim(1), B.data(), B.dim(1), beta, Y.data(), N);
  return Y;
}

void gemm_backward(const Tensor& A, const Tensor& B, const Tensor& C, const GemmParams& p, const Tensor& gy_in, Tensor* gA,
                   Tensor* gB, Tensor* gC) {
  const Tensor gy = to_layout(gy_in, Layout::plain);
  const int64_t M = gy.dim(0), N = gy.dim(1), K = p.trans_a ? A.dim(0) : A.dim(1);
  if (gA) {
    // d(A') = alpha * gy * B'^T  ([M, K]); stored transposed when transA.
    *gA = Tensor(A.shape());
    if (!p.trans_a)
      cpu::sgemm(false, !p.trans_b, M, K, N, p.alpha, gy.data(), N, B.data(), B.dim(1), 0.0f, gA->data(), K);
    else  // gA = alpha * B' * gy^T ([K, M])
      cpu::sgemm(p.trans_b, true, K, M, N, p.alpha, B.data(), B.dim(1), gy.data(), N, 0.0f, gA->data(), M);
  }
  if (gB) {
    // d(B') = alpha * A'^T * gy ([K, N]); stored transposed when transB.
    *gB = Tensor(B.shape());
    if (!p.trans_b)
      cpu::sgemm(!p.trans_a, false, K, N, M, p.alpha, A.data(), A.dim(1), gy.data(), N, 0.0f, gB->data(), N);
    else  // gB = alpha * gy^T * A' ([N, K])
      cpu::sgemm(true, p.trans_a, N, K, M, p.alpha, gy.data(), N, A.data(), A.dim(1), 0.0f, gB->data(), K);
  }
  if (gC && C.defined()) {
    Tensor r = cpu::reduce_to_shape(gy, C.shape());
    for (int64_t i = 0; i < r.numel(); ++i) r.data()[i] *= p.beta;
    *gC = r;
  }
}

namespace {
struct MatmulShapes {
  Shape a, b;   // promoted to >= 2-D
  Shape batch;  // broadcast batch dims
  int64_t M, K, N;
  Shape out;  // numpy result shape (promoted dims removed)
};

MatmulShapes matmul_shapes(const Shape& as, const Shape& bs) {
  if (as.empty() || bs.empty()) throw_error(ErrorKind::bad_input, "MatMul of a scalar");
  MatmulShapes s;
  s.a = as.size() == 1 ? Shape{1, as[0]} : as;
  s.b = bs.size() == 1 ? Shape{bs[0], 1} : bs;
  s.M = s.a[s.a.size() - 2];
  s.K = s.a.back();
  s.N = s.b.back();
  if (s.b[s.b.size() - 2] != s.K)
    throw_error(ErrorKind::bad_input, "MatMul inner dimensions differ: " + shape_to_string(as) + " x " + shape_to_string(bs));
  s.batch = broadcast_shape(Shape(s.a.begin(), s.a.end() - 2), Shape(s.b.begin(), s.b.end() - 2));
  s.out = s.batch;
  if (as.size() > 1) s.out.push_back(s.M);
  if (bs.size() > 1) s.out.push_back(s.N);
  return s;
}

// Offset of batch index `i` (over s.batch) in an operand with batch dims `ob` (right-aligned).
int64_t batch_offset(const Shape& batch, const Shape& ob, int64_t i, int64_t mat) {
  int64_t off = 0, stride = 1;
  for (int d = static_cast<int>(batch.size()) - 1, e = static_cast<int>(ob.size()) - 1; d >= 0; --d, --e) {
    const int64_t idx = i % batch[d];
    i /= batch[d];
    if (e >= 0) {
      if (ob[e] != 1) off += idx * stride;
      stride *= ob[e];
    }
  }
  return off * mat;
}
}  // namespace

Tensor matmul_forward(const Tensor& A_in, const Tensor& B_in) {
  const Tensor A = to_layout(A_in, Layout::plain), B = to_layout(B_in, Layout::plain);
  const MatmulShapes s = matmul_shapes(A.shape(), B.shape());
  Tensor Y(s.out);
  const int64_t nb = shape_numel(s.batch);
  const Shape ab(s.a.begin(), s.a.end() - 2), bb(s.b.begin(), s.b.end() - 2);
  for (int64_t i = 0; i < nb; ++i)
    cpu::sgemm(false, false, s.M, s.N, s.K, 1.0f, A.data() + batch_offset(s.batch, ab, i, s.M * s.K), s.K,
               B.data() + batch_offset(s.batch, bb, i, s.K * s.N), s.N, 0.0f, Y.data() + i * s.M * s.N, s.N);
  return Y;
}

void matmul_backward(const Tensor& A_in, const Tensor& B_in, const Tensor& gy_in, Tensor* gA, Tensor* gB) {
  const Tensor A = to_layout(A_in, Layout::plain), B = to_layout(B_in, Layout::plain);
  const Tensor gy = to_layout(gy_in, Layout::plain);
  const MatmulShapes s = matmul_shapes(A.shape(), B.shape());
  const int64_t nb = shape_numel(s.batch);
  const Shape ab(s.a.begin(), s.a.end() - 2), bb(s.b.begin(), s.b.end() - 2);
  // Accumulate into promoted shapes (beta = 1 where batch dims broadcast), then restore.
  if (gA) {
    Tensor g = Tensor::zeros(s.a);
    for (int64_t i = 0; i < nb; ++i)
      cpu::sgemm(false, true, s.M, s.K, s.N, 1.0f, gy.data() + i * s.M * s.N, s.N,
                 B.data() + batch_offset(s.batch, bb, i, s.K * s.N), s.N, 1.0f,
                 g.data() + batch_offset(s.batch, ab, i, s.M * s.K), s.K);
    *gA = g.reshaped(A.shape());
  }
  if (gB) {
    Tensor g = Tensor::zeros(s.b);
    for (int64_t i = 0; i < nb; ++i)
      cpu::sgemm(true, false, s.K, s.N, s.M, 1.0f, A.data() + batch_offset(s.batch, ab, i, s.M * s.K), s.K,
                 gy.data() + i * s.M * s.N, s.N, 1.0f, g.data() + batch_offset(s.batch, bb, i, s.K * s.N), s.N);
    *gB = g.reshaped(B.shape());
  }
}

}  // namespace hpcnn::ops::cpu
