#include "ops/cpu/dnnl_util.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace hpcnn::ops::cpu {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

void rethrow_dnnl(const char* what, const dnnl::error& e) {
  throw_error(ErrorKind::unsupported,
              std::string(what) + ": oneDNN: " + e.what() + " (status " + std::to_string(static_cast<int>(e.status)) + ")");
}

dnnl::memory wrap_memory(const dnnl::memory::desc& md, const float* p) {
  return dnnl::memory(md, engine(), const_cast<float*>(p));
}

dnnl::memory reordered(const dnnl::memory& have, const dnnl::memory::desc& want) {
  if (have.get_desc() == want) return have;
  dnnl::memory m(want, engine());
  dnnl::reorder(have, m).execute(stream(), const_cast<dnnl::memory&>(have), m);
  return m;
}

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
           int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0 ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (st != dnnl_success)
    throw_error(ErrorKind::unsupported, "oneDNN sgemm failed with status " + std::to_string(static_cast<int>(st)));
}

void sgemm_fc(int64_t M, int64_t N, int64_t K, float alpha, const float* A, const float* W, float beta, float* C) {
  if (4 * M > N || K == 0) return sgemm(false, true, M, N, K, alpha, A, K, W, K, beta, C, N);
  std::vector<float> ct(static_cast<size_t>(M * N));
  sgemm(false, true, N, M, K, alpha, W, K, A, K, 0.0f, ct.data(), M);
  constexpr int64_t kTile = 32;
  for (int64_t i0 = 0; i0 < M; i0 += kTile)
    for (int64_t j0 = 0; j0 < N; j0 += kTile)
      for (int64_t i = i0; i < std::min(M, i0 + kTile); ++i)
        for (int64_t j = j0; j < std::min(N, j0 + kTile); ++j) {
          const float v = ct[static_cast<size_t>(j * M + i)];
          C[i * N + j] = beta == 0.0f ? v : beta * C[i * N + j] + v;
        }
}

}  // namespace hpcnn::ops::cpu
