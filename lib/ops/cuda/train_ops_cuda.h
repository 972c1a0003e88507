// hpcnn ops: the CUDA twins of the element-wise training ops on raw device pointers: the fused
// gradient buffer's gather / scatter / scale and the SGD and LARS updates of ops/update.h, and
// softmax cross-entropy with label smoothing of ops/loss.h. The CPU twins (ops/cpu/update.cpp,
// ops/cpu/loss.cpp) are the reference; the formulas are theirs:
//   gather:  dst[j] = src[positions[j]]       scatter: dst[positions[j]] = src[j]      scale: x *= f
//   sgd_update (momentum, PyTorch's formulation), per element:
//     g' = g + wd * w;  v = momentum * v + g';  w -= lr * (nesterov ? g' + momentum * v : v)
//   lars_update (You, Gitman & Ginsburg, "Large batch training of convolutional networks", 2017,
//   Algorithm 1) over the whole tensor:
//     local = trust * ||w|| / (||g|| + wd * ||w||)  (1 when a norm is 0; norms in double)
//     v = momentum * v + lr * local * (g + wd * w);  w -= v
//   softmax_cross_entropy (Szegedy et al. 2016, section 7): logits [N, K] fp32 row-major, targets
//     (1 - e) * onehot(label) + e / K; the mean loss, and d(mean loss)/d(logits) =
//     (softmax - target) / N into grad [N, K] when grad is non-null; per sample in double with the
//     log-sum-exp shift, summed on the host in sample order (the CPU twin's order).
// Every call runs on `stream`; all but softmax_cross_entropy and check_positions are asynchronous.
// The norms of lars_update are block sums in a fixed grid, reduced in a fixed order: the same
// bits on every run and every rank (they may differ from the CPU twin's sums in the last bits).
// Errors: ErrorKind::device from a failing CUDA call (core/cuda_check.h); ErrorKind::bad_input from
// check_positions (a position outside [0, n), naming it) and softmax_cross_entropy (a label out of
// range, naming the sample; K not positive; an empty batch gives loss 0 as on the CPU).
// Part of the GPU training backend (issue 19); gpu_tests "[train]" checks each against the
// formulas above in double (scripts/gpu-check.sh train).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

namespace hpcnn::ops::cuda {

// Positions are i32 offsets within one tensor (dist/fused_layout.h), as on the CPU. They are checked before a gather or scatter uses them (once per sparse plan, not per step):
// copies them to the host and throws bad_input naming the first one outside [0, n). Synchronous.
void check_positions(const int32_t* positions, int64_t count, int64_t n, const char* what, cudaStream_t stream);

void gather(const float* src, const int32_t* positions, int64_t count, float* dst, cudaStream_t stream);
void scatter(const float* src, const int32_t* positions, int64_t count, float* dst, cudaStream_t stream);
void scale(float* x, int64_t n, float factor, cudaStream_t stream);

struct SgdStep {
  float lr = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

void sgd_update(float* w, const float* g, float* v, int64_t n, const SgdStep& p, cudaStream_t stream);

// Scratch of lars_update, in doubles (the block sums of the two norms).
size_t lars_work_doubles();
void lars_update(float* w, const float* g, float* v, int64_t n, const SgdStep& p, float trust_coefficient, double* work,
                 cudaStream_t stream);

struct LossSums {
  double loss = 0;       // mean over the batch
  int64_t correct1 = 0;  // samples whose label is the arg-max logit
  int64_t correct5 = 0;  // samples whose label is among the 5 largest logits
};

// Scratch of softmax_cross_entropy in bytes: the labels, the per-sample losses and hits.
size_t loss_work_bytes(int64_t N);
// labels: N class indices in host memory (checked there first). Synchronous (the sums come back).
LossSums softmax_cross_entropy(const float* logits, int64_t N, int64_t K, std::span<const int32_t> labels, float label_smoothing,
                               float* grad, void* work, cudaStream_t stream);

}  // namespace hpcnn::ops::cuda
