#include "ops/cpu/dnnl_util.h"

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
  throw_error(ErrorKind::unsupported, std::string(what) + ": oneDNN: " + e.what() + " (status " +
                                          std::to_string(static_cast<int>(e.status)) + ")");
}

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0 ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (st != dnnl_success) throw_error(ErrorKind::unsupported, "oneDNN sgemm failed with status " + std::to_string(static_cast<int>(st)));
}

}  // namespace hpcnn::ops::cpu
