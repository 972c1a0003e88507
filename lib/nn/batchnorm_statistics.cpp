#include "nn/batchnorm_statistics.h"

#include <algorithm>

#include "core/error.h"

namespace hpcnn::nn {

ChannelMoments ChannelMoments::from_sums(double count, const std::vector<double>& sum, const std::vector<double>& sum_sq) {
  ChannelMoments m;
  m.count = count;
  m.mean.resize(sum.size());
  m.m2.resize(sum.size());
  for (size_t c = 0; c < sum.size(); ++c) {
    m.mean[c] = count > 0 ? sum[c] / count : 0.0;
    m.m2[c] = count > 0 ? std::max(0.0, sum_sq[c] - sum[c] * m.mean[c]) : 0.0;
  }
  return m;
}

void ChannelMoments::merge(const ChannelMoments& o) {
  if (o.count == 0) return;
  if (count == 0) {
    *this = o;
    return;
  }
  if (o.channels() != channels())
    throw_error(ErrorKind::bad_input, "BatchNormalization moments of " + std::to_string(o.channels()) + " and " +
                                          std::to_string(channels()) + " channels cannot be merged");
  const double n = count + o.count;
  for (size_t c = 0; c < channels(); ++c) {
    const double d = o.mean[c] - mean[c];
    mean[c] += d * o.count / n;
    m2[c] += o.m2[c] + d * d * count * o.count / n;
  }
  count = n;
}

std::vector<double> ChannelMoments::variance() const {
  std::vector<double> v(channels(), 0.0);
  if (count > 0)
    for (size_t c = 0; c < channels(); ++c) v[c] = m2[c] / count;
  return v;
}

}  // namespace hpcnn::nn
