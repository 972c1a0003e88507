#include "train/batchnorm_sync.h"

#include <algorithm>

#include "core/error.h"

namespace hpcnn::train {

void allreduce_moments(dist::Communicator& comm, std::vector<nn::ChannelMoments*>& moments,
                       const std::vector<const std::vector<double>*>& shift) {
  if (shift.size() != moments.size()) throw_error(ErrorKind::usage, "allreduce_moments: one shift per moments entry");
  std::vector<double> buf;
  for (size_t i = 0; i < moments.size(); ++i) {
    const nn::ChannelMoments& m = *moments[i];
    const size_t C = m.channels();
    buf.push_back(m.count);
    for (size_t c = 0; c < C; ++c) {
      const double k = shift[i] && c < shift[i]->size() ? (*shift[i])[c] : 0.0;
      const double d = m.mean[c] - k;
      buf.push_back(m.count * d);
      buf.push_back(m.m2[c] + m.count * d * d);
    }
  }
  comm.allreduce_sum(buf.data(), buf.size());
  size_t at = 0;
  for (size_t i = 0; i < moments.size(); ++i) {
    nn::ChannelMoments& m = *moments[i];
    const double n = buf[at++];
    m.count = n;
    for (size_t c = 0; c < m.channels(); ++c) {
      const double k = shift[i] && c < shift[i]->size() ? (*shift[i])[c] : 0.0;
      const double s1 = buf[at++], s2 = buf[at++];
      m.mean[c] = n > 0 ? k + s1 / n : 0.0;
      m.m2[c] = n > 0 ? std::max(0.0, s2 - s1 * s1 / n) : 0.0;
    }
  }
}

}  // namespace hpcnn::train
