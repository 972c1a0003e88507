// hpcnn train: the exact cross-rank reduction of BatchNormalization moments
// (nn/batchnorm_statistics.h), for dist-train's running statistics and bn-polish.
//
// Every rank holds moments (count, mean, M2 per channel) of its own data; the result on every
// rank is the moments of all ranks' data together, as one process seeing all of it would compute
// them, not an average of per-rank estimates. Each rank turns its moments into sums shifted by a
// per-channel reference K that every rank shares (e.g. the current running mean), which keeps
// the cancellation of E[x^2] - E[x]^2 small:
//   s1 = n (mean - K),  s2 = M2 + n (mean - K)^2
// one allreduce (double) adds count, s1 and s2 over the ranks, and then
//   mean = K + S1 / N,  M2 = S2 - S1^2 / N.
// All moments of a call travel in one allreduce.
#pragma once

#include <vector>

#include "dist/communicator.h"
#include "nn/batchnorm_statistics.h"

namespace hpcnn::train {

// moments[i] is reduced in place with shift[i] (per channel; empty: 0). Every rank must call it
// with the same number of entries and channels.
void allreduce_moments(dist::Communicator& comm, std::vector<nn::ChannelMoments*>& moments,
                       const std::vector<const std::vector<double>*>& shift);

}  // namespace hpcnn::train
