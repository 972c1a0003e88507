// hpcnn ops/cuda: the launch shape the element-wise kernels of ops/cuda share: kThreads threads a
// block, a grid-stride loop over n elements with at most 2^20 blocks (at least 1).
#pragma once

#include <algorithm>
#include <cstdint>

namespace hpcnn::ops::cuda {

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, int64_t{1} << 20));
}

}  // namespace hpcnn::ops::cuda
