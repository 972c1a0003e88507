// Benchmark of the structured sparse FCL op (ops/sparse_fcl.h) against the dense first FC layer
// (ops/gemm.h), at VGG-16's fc6 shapes by default: x [B, 512, 7, 7], dense W [4096, 25088];
// sparse A [C', 512], B [4096, C'*49].
// usage: fcl_bench [--batch 64] [--channels 512] [--size 7] [--outputs 4096] [--rank 24] [--threads T]
//                  [--warmup 2] [--iterations 10]
// Prints one JSON line per layer and pass ("dense"/"sparse", "forward"/"backward"): the median
// milliseconds over the iterations and the layer's multiply-accumulates. Backward computes the
// input and weight (and bias) gradients. bench/bench_fcl.sh runs it beside PyTorch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/heap.h"
#include "nn/threads.h"
#include "ops/kernels.h"

using namespace hpcnn;
using namespace hpcnn::ops;

namespace {

Tensor random_tensor(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.05f);
  Tensor t(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = g(rng);
  return t;
}

double median_ms(int warmup, int iterations, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 64, C = 512, S = 7, O = 4096, R = 24;
  int threads = 1, warmup = 2, iterations = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (a == "--batch")
      batch = v;
    else if (a == "--channels")
      C = v;
    else if (a == "--size")
      S = v;
    else if (a == "--outputs")
      O = v;
    else if (a == "--rank")
      R = v;
    else if (a == "--threads")
      threads = static_cast<int>(v);
    else if (a == "--warmup")
      warmup = static_cast<int>(v);
    else if (a == "--iterations")
      iterations = static_cast<int>(v);
    else {
      std::fprintf(stderr, "fcl_bench: unknown option %s\n", a.c_str());
      return 1;
    }
  }
  nn::set_num_threads(threads);
  retain_freed_memory();  // as dist-train does: the buffers of one call stay in the heap for the next
  const int64_t HW = S * S, F = C * HW;
  const Tensor x = to_layout(random_tensor({batch, C, S, S}, 1), Layout::nhwc);
  const Tensor W = random_tensor({O, F}, 2), b = random_tensor({O}, 3);
  const Tensor A = random_tensor({R, C, 1, 1}, 4), a = random_tensor({R}, 5), B = random_tensor({O, R * HW}, 6);
  const Tensor gy = random_tensor({batch, O}, 7);
  GemmParams gp;
  gp.trans_b = true;
  const Tensor xflat = to_layout(x, Layout::plain).reshaped({batch, F});  // the dense layer reads the flattened NCHW input
  auto line = [&](const char* layer, const char* pass, double ms, int64_t macs) {
    std::printf("{\"layer\": \"%s\", \"pass\": \"%s\", \"threads\": %d, \"batch\": %lld, \"ms\": %.3f, \"macs\": %lld}\n", layer,
                pass, threads, static_cast<long long>(batch), ms, static_cast<long long>(macs));
    std::fflush(stdout);
  };
  const int64_t dense_macs = batch * O * F, sparse_macs = batch * HW * R * C + batch * O * R * HW;
  line("dense", "forward", median_ms(warmup, iterations, [&] { (void)gemm_forward(xflat, W, b, gp); }), dense_macs);
  line("dense", "backward",
       median_ms(warmup, iterations,
                 [&] {
                   Tensor gA, gB, gC;
                   gemm_backward(xflat, W, b, gp, gy, &gA, &gB, &gC);
                 }),
       2 * dense_macs);
  SparseFclSaved saved;
  line("sparse", "forward", median_ms(warmup, iterations, [&] { (void)sparse_fcl_forward(x, A, a, B, b, &saved); }), sparse_macs);
  line("sparse", "backward",
       median_ms(warmup, iterations,
                 [&] {
                   Tensor gx, gA, ga, gB, gb;
                   sparse_fcl_backward(x, A, B, saved, gy, &gx, &gA, &ga, &gB, &gb);
                 }),
       2 * sparse_macs);
  return 0;
}
