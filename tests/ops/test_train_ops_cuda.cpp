// The CUDA twins of the element-wise training ops (ops/cuda/train_ops_cuda.h) against the formulas
// of ops/update.h and ops/loss.h evaluated in double with plain loops (the definitions the CPU
// twins' tests hold them to). Part of gpu_tests (no device: exit 77). Tolerances: gather, scatter
// and scale exact; the updates relative 1e-5 of the largest value after three steps (fp32 with
// FMA contraction on the device); the loss relative 1e-9 (per sample in double) and its gradient
// 1e-5; LARS bit-identical between two runs from the same state (fixed reduction order).
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/cuda/train_ops_cuda.h"
#include "ops/cuda_test_util.h"

namespace cu = hpcnn::ops::cuda;
using hpcnn::test::check_close;
using hpcnn::test::DeviceArray;
using hpcnn::test::DeviceBuffer;
using hpcnn::test::random_values;
using hpcnn::test::to_float;

namespace {

struct State {
  std::vector<double> w, v;
};

// Three steps of SGD or LARS in double from the same float inputs (g fixed).
State reference_steps(std::vector<float> wf, const std::vector<float>& g, std::vector<float> vf, const cu::SgdStep& p, bool lars,
                      float trust) {
  State s{std::vector<double>(wf.begin(), wf.end()), std::vector<double>(vf.begin(), vf.end())};
  const size_t n = g.size();
  for (int step = 0; step < 3; ++step) {
    if (lars) {
      double wn = 0, gn = 0;
      for (size_t j = 0; j < n; ++j) wn += s.w[j] * s.w[j], gn += double{g[j]} * g[j];
      wn = std::sqrt(wn), gn = std::sqrt(gn);
      const double local = (wn > 0 && gn > 0) ? trust * wn / (gn + p.weight_decay * wn) : 1.0;
      for (size_t j = 0; j < n; ++j) {
        s.v[j] = p.momentum * s.v[j] + p.lr * local * (g[j] + p.weight_decay * s.w[j]);
        s.w[j] -= s.v[j];
      }
    } else {
      for (size_t j = 0; j < n; ++j) {
        const double gj = g[j] + p.weight_decay * s.w[j];
        s.v[j] = p.momentum * s.v[j] + gj;
        s.w[j] -= p.lr * (p.nesterov ? gj + p.momentum * s.v[j] : s.v[j]);
      }
    }
  }
  return s;
}

void run_update(size_t n, const cu::SgdStep& p, bool lars, float trust, bool zero_grad) {
  const std::vector<float> w = to_float(random_values(n, 21)), v = to_float(random_values(n, 23));
  std::vector<float> g = to_float(random_values(n, 22));
  if (zero_grad) std::fill(g.begin(), g.end(), 0.0f);
  DeviceBuffer dw(w), dg(g), dv(v);
  DeviceArray<double> work(cu::lars_work_doubles());
  for (int step = 0; step < 3; ++step) {
    if (lars)
      cu::lars_update(dw.p, dg.p, dv.p, static_cast<int64_t>(n), p, trust, work.p, nullptr);
    else
      cu::sgd_update(dw.p, dg.p, dv.p, static_cast<int64_t>(n), p, nullptr);
  }
  HPCNN_CUDA_CHECK(cudaDeviceSynchronize());
  const State want = reference_steps(w, g, v, p, lars, trust);
  check_close(dw.host(n), want.w, "w", 1e-5);
  check_close(dv.host(n), want.v, "v", 1e-5);
}

}  // namespace

TEST_CASE("CUDA gather, scatter and scale equal their definitions; bad positions are refused", "[train][cuda]") {
  const size_t n = 100003, count = 5001;
  const std::vector<float> src = to_float(random_values(n, 31));
  std::vector<int32_t> pos(count);
  for (size_t j = 0; j < count; ++j) pos[j] = static_cast<int32_t>((j * 7919) % n);  // distinct: 7919 is prime, n > count
  DeviceBuffer dsrc(src), dpacked(count), dfull(n);
  DeviceArray<int32_t> dpos(pos);
  cu::check_positions(dpos.p, count, n, "gather", nullptr);
  cu::gather(dsrc.p, dpos.p, count, dpacked.p, nullptr);
  HPCNN_CUDA_CHECK(cudaMemset(dfull.p, 0, n * sizeof(float)));
  cu::scatter(dpacked.p, dpos.p, count, dfull.p, nullptr);
  cu::scale(dfull.p, n, 0.25f, nullptr);
  const std::vector<float> packed = dpacked.host(count), full = dfull.host(n);
  std::vector<float> want_full(n, 0.0f);
  for (size_t j = 0; j < count; ++j) {
    REQUIRE(packed[j] == src[pos[j]]);
    want_full[pos[j]] = src[pos[j]] * 0.25f;
  }
  CHECK(full == want_full);

  for (int32_t bad : {int32_t{-1}, static_cast<int32_t>(n)}) {
    std::vector<int32_t> p2 = pos;
    p2[17] = bad;
    DeviceArray<int32_t> dp2(p2);
    try {
      cu::check_positions(dp2.p, count, n, "scatter", nullptr);
      FAIL("position " << bad << " accepted");
    } catch (const hpcnn::Error& e) {
      CHECK(e.kind() == hpcnn::ErrorKind::bad_input);
      CHECK_THAT(e.what(), Catch::Contains("position " + std::to_string(bad)) && Catch::Contains("index 17"));
    }
  }
}

TEST_CASE("CUDA SGD and LARS updates follow ops/update.h over three steps", "[train][cuda]") {
  const size_t n = (size_t{1} << 20) + 3;  // more elements than one pass of the grid, an odd tail
  SECTION("SGD, momentum and weight decay") { run_update(n, {0.1f, 0.9f, 5e-4f, false}, false, 0, false); }
  SECTION("SGD, Nesterov") { run_update(n, {0.05f, 0.9f, 1e-4f, true}, false, 0, false); }
  SECTION("SGD, a tensor of 5 elements") { run_update(5, {0.1f, 0.9f, 5e-4f, false}, false, 0, false); }
  SECTION("LARS") { run_update(n, {2.0f, 0.9f, 5e-4f, false}, true, 0.001f, false); }
  SECTION("LARS, a small tensor") { run_update(37, {2.0f, 0.9f, 5e-5f, false}, true, 0.02f, false); }
  SECTION("LARS, zero gradient: local rate 1") { run_update(4099, {0.1f, 0.9f, 5e-4f, false}, true, 0.001f, true); }
}

TEST_CASE("CUDA LARS gives the same bits on every run (fixed reduction order)", "[train][cuda]") {
  const size_t n = 3000017;
  const std::vector<float> w = to_float(random_values(n, 41)), g = to_float(random_values(n, 42)),
                           v = to_float(random_values(n, 43));
  std::vector<std::vector<float>> runs;
  for (int r = 0; r < 2; ++r) {
    DeviceBuffer dw(w), dg(g), dv(v);
    DeviceArray<double> work(cu::lars_work_doubles());
    cu::lars_update(dw.p, dg.p, dv.p, static_cast<int64_t>(n), {1.0f, 0.9f, 5e-4f, false}, 0.001f, work.p, nullptr);
    runs.push_back(dw.host(n));
  }
  CHECK(runs[0] == runs[1]);
}

TEST_CASE("CUDA softmax cross-entropy with label smoothing follows ops/loss.h", "[train][cuda]") {
  for (auto [N, K, eps] : {std::tuple<int64_t, int64_t, float>{257, 10, 0.1f}, {33, 1000, 0.0f}, {1, 3, 0.2f}}) {
    INFO("N " << N << " K " << K << " smoothing " << eps);
    std::vector<double> zd = random_values(N * K, 51);
    for (auto& z : zd) z *= 8;  // peaked rows: some samples right, some wrong
    const std::vector<float> z = to_float(zd);
    std::vector<int32_t> labels(N);
    for (int64_t n = 0; n < N; ++n) labels[n] = static_cast<int32_t>((n * 7) % K);
    double total = 0;
    int64_t c1 = 0, c5 = 0;
    std::vector<double> want_grad(N * K);
    const double off = eps / static_cast<double>(K), on = 1.0 - eps + off;
    for (int64_t n = 0; n < N; ++n) {
      const float* row = z.data() + n * K;
      double mx = row[0];
      for (int64_t k = 0; k < K; ++k) mx = std::max(mx, double{row[k]});
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += std::exp(row[k] - mx);
      const double lse = mx + std::log(sum);
      int64_t greater = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double t = k == labels[n] ? on : off;
        total += -t * (row[k] - lse);  // -sum_k t_k log p_k
        want_grad[n * K + k] = (std::exp(row[k] - lse) - t) / N;
        greater += row[k] > row[labels[n]];
      }
      c1 += greater == 0;
      c5 += greater < 5;
    }
    DeviceBuffer dz(z), dgrad(N * K);
    DeviceArray<unsigned char> work(cu::loss_work_bytes(N));
    const cu::LossSums r = cu::softmax_cross_entropy(dz.p, N, K, labels, eps, dgrad.p, work.p, nullptr);
    CHECK(std::fabs(r.loss - total / N) <= 1e-9 * std::fabs(total / N));
    CHECK(r.correct1 == c1);
    CHECK(r.correct5 == c5);
    check_close(dgrad.host(N * K), want_grad, "grad", 1e-5);
    const cu::LossSums no_grad = cu::softmax_cross_entropy(dz.p, N, K, labels, eps, nullptr, work.p, nullptr);
    CHECK(no_grad.loss == r.loss);
  }
  SECTION("bad labels and shapes") {
    DeviceBuffer dz(to_float(random_values(40, 52)));
    DeviceArray<unsigned char> work(cu::loss_work_bytes(4));
    std::vector<int32_t> labels{0, 9, 10, 3};
    try {
      cu::softmax_cross_entropy(dz.p, 4, 10, labels, 0.1f, nullptr, work.p, nullptr);
      FAIL("label 10 of 10 classes accepted");
    } catch (const hpcnn::Error& e) {
      CHECK(e.kind() == hpcnn::ErrorKind::bad_input);
      CHECK_THAT(e.what(), Catch::Contains("label 10 of sample 2"));
    }
    CHECK_THROWS_AS(cu::softmax_cross_entropy(dz.p, 3, 10, labels, 0.1f, nullptr, work.p, nullptr), hpcnn::Error);
    CHECK(cu::softmax_cross_entropy(dz.p, 0, 10, {}, 0.1f, nullptr, work.p, nullptr).loss == 0);
  }
}
