// The cuBLAS twin of the sparse FCL op (ops/cuda/sparse_fcl_cuda.h): cuBLAS SGEMMs and three
// small kernels (the reduced activations between positions-major and the FC's channel-major
// order, the bias broadcast over rows, column sums).
#include <algorithm>
#include <string>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/sparse_fcl_cuda.h"

namespace hpcnn::ops::cuda {
namespace {

cudaStream_t stream_of(cublasHandle_t h) {
  cudaStream_t s = nullptr;
  HPCNN_CUBLAS_CHECK(cublasGetStream(h, &s));
  return s;
}

// to[n, k*HW + s] = from[(n*HW + s)*r + k] (to_channel_major: the reduction's output in the FC's
// input order), or the inverse; N*HW*r values, small next to B.
__global__ void reorder_reduced(const float* __restrict__ from, float* __restrict__ to, int64_t N, int64_t r, int64_t HW,
                                bool to_channel_major) {
  const int64_t F = r * HW, n_all = N * F;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n_all; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / F, j = i % F;  // j indexes the destination's row
    int64_t src;
    if (to_channel_major) {  // j = k*HW + s  <-  (n*HW + s)*r + k
      const int64_t k = j / HW, s = j % HW;
      src = (n * HW + s) * r + k;
    } else {  // j = s*r + k  <-  n*F + k*HW + s
      const int64_t s = j / r, k = j % r;
      src = n * F + k * HW + s;
    }
    to[i] = from[src];
  }
}

// m[i, j] += bias[j] for a rows x cols row-major matrix.
__global__ void add_row_bias(float* __restrict__ m, const float* __restrict__ bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    m[i] += bias[i % cols];
}

// out[j] = sum_i m[i, j]: one block per column, the rows strided over its threads, a tree in
// shared memory (the order is fixed: the same bits on every run).
__global__ void column_sums(const float* __restrict__ m, float* __restrict__ out, int64_t rows, int64_t cols) {
  __shared__ float part[kThreads];
  const int64_t j = blockIdx.x;
  float acc = 0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) acc += m[i * cols + j];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[j] = part[0];
}

void check_shape(const SparseFclShape& s) {
  if (s.N < 1 || s.C < 1 || s.HW < 1 || s.r < 1 || s.O < 1)
    throw_error(ErrorKind::usage, "sparse FCL (CUDA): every dimension must be >= 1, got N " + std::to_string(s.N) + ", C " +
                                      std::to_string(s.C) + ", HW " + std::to_string(s.HW) + ", r " + std::to_string(s.r) +
                                      ", O " + std::to_string(s.O));
}

void reorder(cublasHandle_t h, const float* from, float* to, const SparseFclShape& s, bool to_channel_major) {
  reorder_reduced<<<blocks_for(s.N * s.features()), kThreads, 0, stream_of(h)>>>(from, to, s.N, s.r, s.HW, to_channel_major);
  HPCNN_CUDA_CHECK(cudaGetLastError());
}

void add_bias(cublasHandle_t h, float* m, const float* bias, int64_t rows, int64_t cols) {
  add_row_bias<<<blocks_for(rows * cols), kThreads, 0, stream_of(h)>>>(m, bias, rows, cols);
  HPCNN_CUDA_CHECK(cudaGetLastError());
}

void sum_columns(cublasHandle_t h, const float* m, float* out, int64_t rows, int64_t cols) {
  column_sums<<<static_cast<unsigned>(cols), kThreads, 0, stream_of(h)>>>(m, out, rows, cols);
  HPCNN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void gemm_row_major(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                    const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const float one = 1.0f;
  HPCNN_CUBLAS_CHECK(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
                                 static_cast<int>(M), static_cast<int>(K), &one, B, static_cast<int>(ldb), A,
                                 static_cast<int>(lda), &beta, C, static_cast<int>(ldc)));
}

size_t sparse_fcl_work_floats(const SparseFclShape& s) { return static_cast<size_t>(2 * s.N * s.features()); }

void sparse_fcl_forward(cublasHandle_t h, const SparseFclShape& s, const float* x, const float* A, const float* a, const float* B,
                        const float* b, float* z, float* y, float* work) {
  check_shape(s);
  const int64_t P = s.N * s.HW, F = s.features();
  float* zp = work;                                                            // [P, r]
  gemm_row_major(h, false, true, P, s.r, s.C, x, s.C, A, s.C, 0.0f, zp, s.r);  // zp = x A^T
  if (a) add_bias(h, zp, a, P, s.r);
  reorder(h, zp, z, s, true);                                             // z [N, F]
  gemm_row_major(h, false, true, s.N, s.O, F, z, F, B, F, 0.0f, y, s.O);  // y = z B^T
  if (b) add_bias(h, y, b, s.N, s.O);
}

void sparse_fcl_backward(cublasHandle_t h, const SparseFclShape& s, const float* x, const float* A, const float* B,
                         const float* z, const float* gy, float* gx, float* gA, float* ga, float* gB, float* gb, float* work) {
  check_shape(s);
  const int64_t P = s.N * s.HW, F = s.features();
  if (gB) gemm_row_major(h, true, false, s.O, F, s.N, gy, s.O, z, F, 0.0f, gB, F);  // gB = gy^T z, B's layout
  if (gb) sum_columns(h, gy, gb, s.N, s.O);
  if (!gx && !gA && !ga) return;
  float* gzc = work;                                                          // [N, F]
  float* gz = work + s.N * F;                                                 // [P, r]
  gemm_row_major(h, false, false, s.N, F, s.O, gy, s.O, B, F, 0.0f, gzc, F);  // gzc = gy B
  reorder(h, gzc, gz, s, false);
  if (ga) sum_columns(h, gz, ga, P, s.r);
  if (gA) gemm_row_major(h, true, false, s.r, s.C, P, gz, s.r, x, s.C, 0.0f, gA, s.C);   // gA = gz^T x
  if (gx) gemm_row_major(h, false, false, P, s.C, s.r, gz, s.r, A, s.C, 0.0f, gx, s.C);  // gx = gz A
}

}  // namespace hpcnn::ops::cuda
