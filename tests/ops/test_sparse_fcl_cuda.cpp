// The cuBLAS twin of the sparse FCL op (ops/cuda/sparse_fcl_cuda.h) against the op's definition
// in double with plain loops, forward and backward (the loss sum(y * gy) is linear in each operand,
// so the reference gradients are exact sums, the same definition tests/ops/test_sparse_fcl.cpp
// holds the CPU twin to). Part of gpu_tests (tests/huffman/test_cuda_codec.cpp has its main: no
// device, exit 77). Tolerance: relative 1e-4 of the largest reference value (fp32 GEMMs, TF32 off).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "core/cuda_check.h"
#include "ops/cuda/sparse_fcl_cuda.h"
#include "ops/cuda_test_util.h"

using hpcnn::ops::cuda::SparseFclShape;

namespace {

using hpcnn::test::check_close;
using hpcnn::test::DeviceBuffer;
using hpcnn::test::random_values;
using hpcnn::test::to_float;

void run_case(const SparseFclShape& s, bool biases) {
  const int64_t N = s.N, C = s.C, HW = s.HW, R = s.r, O = s.O, P = N * HW, F = R * HW;
  const auto x = random_values(N * C * HW, 1), A = random_values(R * C, 2), a = random_values(R, 3), B = random_values(O * F, 4),
             b = random_values(O, 5), gy = random_values(N * O, 6);
  // The definition, x NCHW: z[n, k, q], y[n, o], and the exact gradients of sum(y * gy).
  std::vector<double> z(N * R * HW), y(N * O), gz(N * R * HW, 0), gx(N * C * HW, 0), gA(R * C, 0), ga(R, 0), gB(O * F, 0),
      gb(O, 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < R; ++k)
      for (int64_t q = 0; q < HW; ++q) {
        double v = biases ? a[k] : 0;
        for (int64_t c = 0; c < C; ++c) v += A[k * C + c] * x[(n * C + c) * HW + q];
        z[(n * R + k) * HW + q] = v;
      }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      double v = biases ? b[o] : 0;
      for (int64_t k = 0; k < R; ++k)
        for (int64_t q = 0; q < HW; ++q) v += B[o * F + k * HW + q] * z[(n * R + k) * HW + q];
      y[n * O + o] = v;
      gb[o] += gy[n * O + o];
      for (int64_t k = 0; k < R; ++k)
        for (int64_t q = 0; q < HW; ++q) {
          gB[o * F + k * HW + q] += gy[n * O + o] * z[(n * R + k) * HW + q];
          gz[(n * R + k) * HW + q] += gy[n * O + o] * B[o * F + k * HW + q];
        }
    }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < R; ++k)
      for (int64_t q = 0; q < HW; ++q) {
        const double g = gz[(n * R + k) * HW + q];
        ga[k] += g;
        for (int64_t c = 0; c < C; ++c) {
          gA[k * C + c] += g * x[(n * C + c) * HW + q];
          gx[(n * C + c) * HW + q] += g * A[k * C + c];
        }
      }
  // Device side: x and gx channels-last, z as [P, r].
  std::vector<float> x_nhwc(P * C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t q = 0; q < HW; ++q) x_nhwc[(n * HW + q) * C + c] = static_cast<float>(x[(n * C + c) * HW + q]);
  cublasHandle_t h = nullptr;
  HPCNN_CUBLAS_CHECK(cublasCreate(&h));
  HPCNN_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  {
    DeviceBuffer dx(x_nhwc), dA(to_float(A)), da(to_float(a)), dB(to_float(B)), db(to_float(b)), dgy(to_float(gy));
    DeviceBuffer dz(N * F), dy(N * O), dgx(P * C), dgA(R * C), dga(R), dgB(O * F), dgb(O),
        work(hpcnn::ops::cuda::sparse_fcl_work_floats(s));
    hpcnn::ops::cuda::sparse_fcl_forward(h, s, dx.p, dA.p, biases ? da.p : nullptr, dB.p, biases ? db.p : nullptr, dz.p, dy.p,
                                         work.p);
    hpcnn::ops::cuda::sparse_fcl_backward(h, s, dx.p, dA.p, dB.p, dz.p, dgy.p, dgx.p, dgA.p, dga.p, dgB.p, dgb.p, work.p);
    HPCNN_CUDA_CHECK(cudaDeviceSynchronize());
    check_close(dy.host(N * O), y, "y");
    std::vector<double> gx_nhwc(P * C);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t q = 0; q < HW; ++q)
        for (int64_t c = 0; c < C; ++c) gx_nhwc[(n * HW + q) * C + c] = gx[(n * C + c) * HW + q];
    check_close(dz.host(N * F), z, "z (saved, [N, r*HW])");
    check_close(dgx.host(P * C), gx_nhwc, "gx (NHWC)");
    check_close(dgA.host(R * C), gA, "gA");
    check_close(dga.host(R), ga, "ga");
    check_close(dgB.host(O * F), gB, "gB (channel-major, as B)");
    check_close(dgb.host(O), gb, "gb");
  }
  cublasDestroy(h);
}

}  // namespace

TEST_CASE("cuBLAS sparse FCL matches its definition, forward and backward", "[ops][sparse_fcl][cuda]") {
  run_case({3, 5, 12, 2, 4}, true);      // the CPU twin test's shapes
  run_case({5, 37, 49, 6, 33}, false);   // odd sizes, no biases
  run_case({8, 512, 49, 24, 96}, true);  // VGG-16's fc6 reduction (C = 512, 7x7, C' = 24), fewer outputs
}

TEST_CASE("cuBLAS row-major GEMM wrapper against loops, every transpose", "[ops][cuda]") {
  const int64_t M = 7, N = 5, K = 9;
  cublasHandle_t h = nullptr;
  HPCNN_CUBLAS_CHECK(cublasCreate(&h));
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const auto A = random_values(M * K, 11), B = random_values(K * N, 12);
      std::vector<double> C(M * N, 0);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j)
          for (int64_t k = 0; k < K; ++k) C[i * N + j] += (ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
      DeviceBuffer dA(to_float(A)), dB(to_float(B)), dC(M * N);
      hpcnn::ops::cuda::gemm_row_major(h, ta, tb, M, N, K, dA.p, ta ? M : K, dB.p, tb ? K : N, 0.0f, dC.p, N);
      INFO("trans_a " << ta << ", trans_b " << tb);
      check_close(dC.host(M * N), C, "C");
    }
  cublasDestroy(h);
}
