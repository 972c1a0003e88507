// GPU benchmark of the structured sparse FCL (ops/cuda/sparse_fcl_cuda.h, cuBLAS) against the
// dense first FC layer (cuBLAS SGEMM), at VGG-16's fc6 shapes: x [B, 512, 7, 7], dense W
// [4096, 25088]; sparse A [C', 512], B [4096, C'*49]. fp32, TF32 off (CUBLAS_DEFAULT_MATH; --tf32
// allows it and says so). Times with CUDA events: the mean of --iterations back-to-back calls
// (default 200) after --warmup (20), each batch size in --batches (default 256,64). Backward
// computes the input and weight gradients (and the biases'). Prints one JSON line per batch,
// layer and pass, then the speed-ups beside the paper's (Matsumura et al., CCPE 2021: 14.97x
// forward, 16.67x backward, cuBLAS on VGG-16's fc6) and the MAC ratio.
// usage: fcl_bench_gpu [--batches 256,64] [--channels 512] [--size 7] [--outputs 4096] [--rank 24]
//                      [--warmup 20] [--iterations 200] [--tf32]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda_check.h"
#include "ops/cuda/sparse_fcl_cuda.h"

using namespace hpcnn::ops::cuda;

namespace {

struct Buffer {
  float* p = nullptr;
  Buffer(size_t n, uint64_t seed) {
    HPCNN_CUDA_CHECK(cudaMalloc(&p, n * sizeof(float)));
    std::vector<float> h(n);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.0f, 0.05f);
    for (auto& v : h) v = g(rng);
    HPCNN_CUDA_CHECK(cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  ~Buffer() { cudaFree(p); }
};

double mean_ms(int warmup, int iterations, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t a, b;
  HPCNN_CUDA_CHECK(cudaEventCreate(&a));
  HPCNN_CUDA_CHECK(cudaEventCreate(&b));
  HPCNN_CUDA_CHECK(cudaEventRecord(a));
  for (int i = 0; i < iterations; ++i) fn();
  HPCNN_CUDA_CHECK(cudaEventRecord(b));
  HPCNN_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  HPCNN_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / iterations;
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<int64_t> batches{256, 64};
  int64_t C = 512, S = 7, O = 4096, R = 24;
  int warmup = 20, iterations = 200;
  bool tf32 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tf32") {
      tf32 = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "fcl_bench_gpu: %s needs a value\n", a.c_str());
      return 1;
    }
    const std::string v = argv[++i];
    if (a == "--batches") {
      batches.clear();
      std::stringstream ss(v);
      for (std::string t; std::getline(ss, t, ',');) batches.push_back(std::atoll(t.c_str()));
    } else if (a == "--channels")
      C = std::atoll(v.c_str());
    else if (a == "--size")
      S = std::atoll(v.c_str());
    else if (a == "--outputs")
      O = std::atoll(v.c_str());
    else if (a == "--rank")
      R = std::atoll(v.c_str());
    else if (a == "--warmup")
      warmup = std::atoi(v.c_str());
    else if (a == "--iterations")
      iterations = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "fcl_bench_gpu: unknown option %s\n", a.c_str());
      return 1;
    }
  }
  cudaDeviceProp prop{};
  HPCNN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  cublasHandle_t h = nullptr;
  HPCNN_CUBLAS_CHECK(cublasCreate(&h));
  HPCNN_CUBLAS_CHECK(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  std::fprintf(stderr, "fcl_bench_gpu: %s, fp32, TF32 %s, %d iterations after %d\n", prop.name, tf32 ? "allowed" : "off",
               iterations, warmup);
  const int64_t HW = S * S, D = C * HW, F = R * HW;
  const double dense_macs = static_cast<double>(D) * O,
               sparse_macs = static_cast<double>(HW) * C * R + static_cast<double>(F) * O;
  for (int64_t N : batches) {
    const SparseFclShape s{N, C, HW, R, O};
    Buffer x(N * D, 1), W(O * D, 2), bias(O, 3), A(R * C, 4), a(R, 5), B(O * F, 6), gy(N * O, 7);
    Buffer y(N * O, 8), gx(N * D, 9), gW(O * D, 10), gb(O, 11), z(N * HW * R, 12), gA(R * C, 13), ga(R, 14), gB(O * F, 15),
        work(sparse_fcl_work_floats(s), 16);
    // Dense: y = x W^T + b; backward gx = gy W, gW = gy^T x, gb (the same column sums as the
    // sparse op's, through its backward with only gb asked for).
    const double dense_f =
        mean_ms(warmup, iterations, [&] { gemm_row_major(h, false, true, N, O, D, x.p, D, W.p, D, 0.0f, y.p, O); });
    const double dense_b = mean_ms(warmup, iterations, [&] {
      gemm_row_major(h, false, false, N, D, O, gy.p, O, W.p, D, 0.0f, gx.p, D);
      gemm_row_major(h, true, false, O, D, N, gy.p, O, x.p, D, 0.0f, gW.p, D);
      sparse_fcl_backward(h, s, nullptr, nullptr, nullptr, nullptr, gy.p, nullptr, nullptr, nullptr, nullptr, gb.p, work.p);
    });
    const double sparse_f =
        mean_ms(warmup, iterations, [&] { sparse_fcl_forward(h, s, x.p, A.p, a.p, B.p, bias.p, z.p, y.p, work.p); });
    const double sparse_b = mean_ms(
        warmup, iterations, [&] { sparse_fcl_backward(h, s, x.p, A.p, B.p, z.p, gy.p, gx.p, gA.p, ga.p, gB.p, gb.p, work.p); });
    using Row = std::tuple<const char*, const char*, double, double>;
    for (auto [layer, pass, ms, macs] :
         {Row{"dense", "forward", dense_f, dense_macs}, Row{"dense", "backward", dense_b, 2 * dense_macs},
          Row{"sparse", "forward", sparse_f, sparse_macs}, Row{"sparse", "backward", sparse_b, 2 * sparse_macs}})
      std::printf(
          "{\"device\": \"%s\", \"batch\": %lld, \"layer\": \"%s\", \"pass\": \"%s\", \"ms\": %.5f, \"tflops\": %.2f, \"tf32\": "
          "%s}\n",
          prop.name, static_cast<long long>(N), layer, pass, ms, 2 * macs * N / ms / 1e9, tf32 ? "true" : "false");
    std::printf(
        "# batch %lld: forward %.2fx, backward %.2fx faster sparse than dense (paper at batch 256: 14.97x, 16.67x; MAC ratio "
        "%.2fx)\n",
        static_cast<long long>(N), dense_f / sparse_f, dense_b / sparse_b, dense_macs / sparse_macs);
  }
  cublasDestroy(h);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fcl_bench_gpu: error: %s\n", e.what());
  return 5;
}
