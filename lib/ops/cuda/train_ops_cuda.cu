// The CUDA twins of the element-wise training ops (ops/cuda/train_ops_cuda.h): grid-stride
// kernels; LARS's norms as fixed-grid block sums in double, tree-reduced in a fixed order.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/train_ops_cuda.h"

namespace hpcnn::ops::cuda {
namespace {

constexpr int kNormBlocks = kThreads;  // the update kernel reduces the block sums with one thread each

__global__ void gather_kernel(const float* __restrict__ src, const int32_t* __restrict__ pos, int64_t n,
                              float* __restrict__ dst) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < n; j += int64_t{gridDim.x} * blockDim.x)
    dst[j] = src[pos[j]];
}

__global__ void scatter_kernel(const float* __restrict__ src, const int32_t* __restrict__ pos, int64_t n,
                               float* __restrict__ dst) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < n; j += int64_t{gridDim.x} * blockDim.x)
    dst[pos[j]] = src[j];
}

__global__ void scale_kernel(float* __restrict__ x, int64_t n, float f) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < n; j += int64_t{gridDim.x} * blockDim.x) x[j] *= f;
}

__global__ void sgd_kernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ v, int64_t n, float lr,
                           float mu, float wd, bool nesterov) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < n; j += int64_t{gridDim.x} * blockDim.x) {
    const float gj = g[j] + wd * w[j];
    const float vj = mu * v[j] + gj;
    v[j] = vj;
    w[j] -= lr * (nesterov ? gj + mu * vj : vj);
  }
}

// Tree sum of kThreads doubles in shared memory; the result in s[0].
__device__ void block_sum(double* s) {
  for (int half = kThreads / 2; half > 0; half /= 2) {
    __syncthreads();
    if (threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
  }
  __syncthreads();
}

// work[b] = sum of w^2 over block b's elements, work[kNormBlocks + b] the same for g.
__global__ void norm_sums_kernel(const float* __restrict__ w, const float* __restrict__ g, int64_t n, double* __restrict__ work) {
  __shared__ double sw[kThreads], sg[kThreads];
  double aw = 0, ag = 0;
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < n; j += int64_t{gridDim.x} * blockDim.x) {
    aw += static_cast<double>(w[j]) * w[j];
    ag += static_cast<double>(g[j]) * g[j];
  }
  sw[threadIdx.x] = aw;
  sg[threadIdx.x] = ag;
  block_sum(sw);
  block_sum(sg);
  if (threadIdx.x == 0) {
    work[blockIdx.x] = sw[0];
    work[kNormBlocks + blockIdx.x] = sg[0];
  }
}

__global__ void lars_kernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ v, int64_t n, float lr,
                            float mu, float wd, float trust, const double* __restrict__ work) {
  __shared__ double sw[kThreads], sg[kThreads];
  sw[threadIdx.x] = work[threadIdx.x];
  sg[threadIdx.x] = work[kNormBlocks + threadIdx.x];
  block_sum(sw);
  block_sum(sg);
  const double wn = sqrt(sw[0]), gn = sqrt(sg[0]);
  const double local = (wn > 0 && gn > 0) ? trust * wn / (gn + wd * wn) : 1.0;
  const float s = static_cast<float>(lr * local);
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < n; j += int64_t{gridDim.x} * blockDim.x) {
    const float vj = mu * v[j] + s * (g[j] + wd * w[j]);
    v[j] = vj;
    w[j] -= vj;
  }
}

// One thread per sample: loss[n] in double, hits[n] = 1 (top-1) + 2 (top-5).
__global__ void softmax_xent_kernel(const float* __restrict__ z_all, const int32_t* __restrict__ labels, int64_t N, int64_t K,
                                    double on, double off, float* __restrict__ grad, double* __restrict__ loss,
                                    int32_t* __restrict__ hits) {
  for (int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; n < N; n += int64_t{gridDim.x} * blockDim.x) {
    const float* z = z_all + n * K;
    const int32_t label = labels[n];
    float mx = z[0];
    for (int64_t k = 1; k < K; ++k) mx = fmaxf(mx, z[k]);
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += exp(static_cast<double>(z[k]) - mx);
    const double lse = mx + log(sum);
    double tz = 0;
    int64_t greater = 0;
    for (int64_t k = 0; k < K; ++k) {
      tz += (k == label ? on : off) * z[k];
      greater += z[k] > z[label];
    }
    loss[n] = lse - tz;
    hits[n] = (greater == 0 ? 1 : 0) + (greater < 5 ? 2 : 0);
    if (grad) {
      float* gr = grad + n * K;
      for (int64_t k = 0; k < K; ++k)
        gr[k] = static_cast<float>((exp(static_cast<double>(z[k]) - lse) - (k == label ? on : off)) / N);
    }
  }
}

size_t align8(size_t b) { return (b + 7) / 8 * 8; }

}  // namespace

void check_positions(const int32_t* positions, int64_t count, int64_t n, const char* what, cudaStream_t stream) {
  if (count <= 0) return;
  std::vector<int32_t> host(static_cast<size_t>(count));
  HPCNN_CUDA_CHECK(cudaMemcpyAsync(host.data(), positions, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  HPCNN_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int64_t j = 0; j < count; ++j)
    if (host[j] < 0 || host[j] >= n)
      throw_error(ErrorKind::bad_input, std::string(what) + ": position " + std::to_string(host[j]) + " (index " +
                                            std::to_string(j) + ") outside [0, " + std::to_string(n) + ")");
}

void gather(const float* src, const int32_t* positions, int64_t count, float* dst, cudaStream_t stream) {
  if (count <= 0) return;
  gather_kernel<<<blocks_for(count), kThreads, 0, stream>>>(src, positions, count, dst);
  HPCNN_CUDA_CHECK(cudaGetLastError());
}

void scatter(const float* src, const int32_t* positions, int64_t count, float* dst, cudaStream_t stream) {
  if (count <= 0) return;
  scatter_kernel<<<blocks_for(count), kThreads, 0, stream>>>(src, positions, count, dst);
  HPCNN_CUDA_CHECK(cudaGetLastError());
}

void scale(float* x, int64_t n, float factor, cudaStream_t stream) {
  if (n <= 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, factor);
  HPCNN_CUDA_CHECK(cudaGetLastError());
}

void sgd_update(float* w, const float* g, float* v, int64_t n, const SgdStep& p, cudaStream_t stream) {
  if (n <= 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(w, g, v, n, p.lr, p.momentum, p.weight_decay, p.nesterov);
  HPCNN_CUDA_CHECK(cudaGetLastError());
}

size_t lars_work_doubles() { return 2 * kNormBlocks; }

void lars_update(float* w, const float* g, float* v, int64_t n, const SgdStep& p, float trust, double* work,
                 cudaStream_t stream) {
  if (n <= 0) return;
  norm_sums_kernel<<<kNormBlocks, kThreads, 0, stream>>>(w, g, n, work);
  HPCNN_CUDA_CHECK(cudaGetLastError());
  lars_kernel<<<std::min(blocks_for(n), 4096u), kThreads, 0, stream>>>(w, g, v, n, p.lr, p.momentum, p.weight_decay, trust, work);
  HPCNN_CUDA_CHECK(cudaGetLastError());
}

size_t loss_work_bytes(int64_t N) {
  const size_t n = static_cast<size_t>(std::max<int64_t>(N, 0));
  return align8(n * sizeof(int32_t)) + n * sizeof(double) + align8(n * sizeof(int32_t));
}

LossSums softmax_cross_entropy(const float* logits, int64_t N, int64_t K, std::span<const int32_t> labels, float eps, float* grad,
                               void* work, cudaStream_t stream) {
  if (N < 0 || K <= 0)
    throw_error(ErrorKind::bad_input,
                "logits of shape [" + std::to_string(N) + ", " + std::to_string(K) + "] are not [N, K] with K > 0");
  if (static_cast<int64_t>(labels.size()) != N)
    throw_error(ErrorKind::bad_input, std::to_string(labels.size()) + " labels for " + std::to_string(N) + " logits rows");
  if (N == 0) return {};  // the CPU twin's mean over an empty batch
  for (int64_t n = 0; n < N; ++n)
    if (labels[n] < 0 || labels[n] >= K)
      throw_error(ErrorKind::bad_input, "label " + std::to_string(labels[n]) + " of sample " + std::to_string(n) +
                                            " is outside [0, " + std::to_string(K) + ")");
  auto* base = static_cast<unsigned char*>(work);
  auto* d_labels = reinterpret_cast<int32_t*>(base);
  auto* d_loss = reinterpret_cast<double*>(base + align8(N * sizeof(int32_t)));
  auto* d_hits = reinterpret_cast<int32_t*>(base + align8(N * sizeof(int32_t)) + N * sizeof(double));
  HPCNN_CUDA_CHECK(cudaMemcpyAsync(d_labels, labels.data(), N * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  const double off = eps / static_cast<double>(K), on = 1.0 - eps + off;
  softmax_xent_kernel<<<blocks_for(N), kThreads, 0, stream>>>(logits, d_labels, N, K, on, off, grad, d_loss, d_hits);
  HPCNN_CUDA_CHECK(cudaGetLastError());
  std::vector<double> loss(static_cast<size_t>(N));
  std::vector<int32_t> hits(static_cast<size_t>(N));
  HPCNN_CUDA_CHECK(cudaMemcpyAsync(loss.data(), d_loss, N * sizeof(double), cudaMemcpyDeviceToHost, stream));
  HPCNN_CUDA_CHECK(cudaMemcpyAsync(hits.data(), d_hits, N * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  HPCNN_CUDA_CHECK(cudaStreamSynchronize(stream));
  LossSums r;
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    total += loss[n];
    r.correct1 += hits[n] & 1;
    r.correct5 += (hits[n] >> 1) & 1;
  }
  r.loss = total / N;
  return r;
}

}  // namespace hpcnn::ops::cuda
