// The CPU twin of ops/loss.h.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/cpu/kernels.h"

namespace hpcnn::ops::cpu {

LossResult softmax_cross_entropy(const Tensor& logits_in, std::span<const int32_t> labels, float eps, Tensor* grad) {
  const Tensor logits = to_layout(logits_in, Layout::plain);
  if (logits.rank() != 2)
    throw_error(ErrorKind::bad_input, "logits of shape " + shape_to_string(logits.shape()) + " are not [N, K]");
  const int64_t N = logits.dim(0), K = logits.dim(1);
  if (static_cast<int64_t>(labels.size()) != N)
    throw_error(ErrorKind::bad_input, std::to_string(labels.size()) + " labels for " + std::to_string(N) + " logits rows");
  for (int64_t n = 0; n < N; ++n)
    if (labels[n] < 0 || labels[n] >= K)
      throw_error(ErrorKind::bad_input, "label " + std::to_string(labels[n]) + " of sample " + std::to_string(n) +
                                            " is outside [0, " + std::to_string(K) + ")");
  if (grad) *grad = Tensor({N, K});
  LossResult r;
  double total = 0;
  const double off = eps / static_cast<double>(K), on = 1.0 - eps + off;
  for (int64_t n = 0; n < N; ++n) {
    const float* z = logits.data() + n * K;
    const float mx = *std::max_element(z, z + K);
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += std::exp(static_cast<double>(z[k]) - mx);
    const double lse = mx + std::log(sum);
    // loss = -sum_k t_k log p_k = lse - sum_k t_k z_k
    double tz = 0;
    for (int64_t k = 0; k < K; ++k) tz += (k == labels[n] ? on : off) * z[k];
    total += lse - tz;
    if (grad) {
      float* g = grad->data() + n * K;
      for (int64_t k = 0; k < K; ++k)
        g[k] = static_cast<float>((std::exp(static_cast<double>(z[k]) - lse) - (k == labels[n] ? on : off)) / N);
    }
    int64_t greater = 0;
    for (int64_t k = 0; k < K; ++k) greater += z[k] > z[labels[n]];
    r.correct1 += greater == 0;
    r.correct5 += greater < 5;
  }
  r.loss = N ? total / N : 0.0;
  return r;
}

}  // namespace hpcnn::ops::cpu
