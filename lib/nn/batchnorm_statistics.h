// hpcnn nn: per-channel BatchNormalization statistics, and the ways a Model treats them in
// training-mode forwards. One specification for dist-train (running statistics that equal those
// of one process training on the global batch) and bn-polish (re-estimating the statistics of a
// trained model on non-augmented data with frozen weights: PreciseBN, Wu & Johnson, "Rethinking
// 'batch' in BatchNorm", 2021; Final Polishing, Kasagi et al., HPDC 2020).
//
// Moments are kept per channel in double precision as (count, mean, M2), M2 = the sum of squared
// deviations from the mean, and merged with the parallel update of Chan, Golub & LeVeque
// (1979), which is exact in exact arithmetic and stable in floating point:
//   n = na + nb,  d = mean_b - mean_a,  mean = mean_a + d * nb / n,  M2 = M2a + M2b + d^2 na nb / n.
// The population variance is M2 / count (the ONNX convention for BatchNormalization).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpcnn::nn {

struct ChannelMoments {
  double count = 0;          // values seen per channel (N * H * W of each batch, summed)
  std::vector<double> mean;  // per channel
  std::vector<double> m2;    // per channel: sum of squared deviations from the mean

  // From per-channel sums over `count` values each: sum x and sum x^2.
  static ChannelMoments from_sums(double count, const std::vector<double>& sum, const std::vector<double>& sum_sq);
  // Merges `other` into this (Chan et al.); an empty side (count 0) is the identity.
  // ErrorKind::bad_input when the channel counts differ.
  void merge(const ChannelMoments& other);
  std::vector<double> variance() const;  // m2 / count per channel
  size_t channels() const { return mean.size(); }
};

// What a Model's training-mode forward does with each BatchNormalization's batch statistics.
enum class BatchNormStatistics {
  running_update,  // update running_mean / running_var with the node's momentum (the default):
                   //   running = momentum * running + (1 - momentum) * batch (mean, population var)
  deferred,        // record the batch moments; the caller reduces them (e.g. over ranks) and
                   // applies Model::update_running_statistics: nothing changes until it does
  collect,         // merge the batch moments into one accumulator per layer; running statistics
                   // untouched (bn-polish: then Model::set_running_statistics)
};

// A BatchNormalization node whose running statistics are Model buffers.
struct BatchNormLayer {
  std::string node;        // "node 'bn1' (BatchNormalization)"
  size_t mean_buffer = 0;  // indices into Model::buffers()
  size_t var_buffer = 0;
  float momentum = 0.9f;
  int64_t channels = 0;
};

}  // namespace hpcnn::nn
