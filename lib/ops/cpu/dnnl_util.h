// hpcnn ops (CPU): the process-wide oneDNN CPU engine and stream, and error translation.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <string>

namespace hpcnn::ops::cpu {

dnnl::engine& engine();
dnnl::stream& stream();
// Runs fn(); a dnnl::error becomes hpcnn::Error(ErrorKind::unsupported) naming `what`.
template <class Fn>
auto dnnl_call(const char* what, Fn&& fn) -> decltype(fn());
[[noreturn]] void rethrow_dnnl(const char* what, const dnnl::error& e);

template <class Fn>
auto dnnl_call(const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    rethrow_dnnl(what, e);
  }
}

// A oneDNN memory over the f32 buffer `p` (not owned).
dnnl::memory wrap_memory(const dnnl::memory::desc& md, const float* p);
// `have` itself when its descriptor is `want`, else a new memory in `want` holding its values
// (a reorder on the process stream).
dnnl::memory reordered(const dnnl::memory& have, const dnnl::memory::desc& want);

// Row-major C = alpha * op(A) * op(B) + beta * C via oneDNN's sgemm (A: M x K after op, B: K x N).
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
           int64_t ldb, float beta, float* C, int64_t ldc);

// Row-major C[M, N] = alpha * A[M, K] * W[N, K]^T + beta * C: the FC layer's product (W the weight,
// transB = 1). A wide output (4 M <= N: a batch of samples against many neurons) is computed as
// C^T = W A^T and transposed in cache-sized tiles: oneDNN's sgemm runs that orientation faster
// (VGG-16's fc6 at batch 64: 151 -> 90 ms at two threads, the same at one).
void sgemm_fc(int64_t M, int64_t N, int64_t K, float alpha, const float* A, const float* W, float beta, float* C);

}  // namespace hpcnn::ops::cpu
