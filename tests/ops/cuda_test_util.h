// Helpers of the GPU op tests (gpu_tests): seeded random values, a device buffer of floats or of
// any trivially copyable type, and the relative closeness check of a device result against a
// reference in double (largest error within rel * the largest reference value, + 1e-6).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "core/cuda_check.h"

namespace hpcnn::test {

inline std::vector<double> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

inline std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

template <typename T = float>
struct DeviceArray {
  T* p = nullptr;
  explicit DeviceArray(size_t n) { HPCNN_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T))); }
  DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    HPCNN_CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::vector<T> host(size_t n) const {
    std::vector<T> v(n);
    HPCNN_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};
using DeviceBuffer = DeviceArray<float>;

inline void check_close(const std::vector<float>& got, const std::vector<double>& want, const char* what, double rel = 1e-4) {
  REQUIRE(got.size() == want.size());
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  size_t worst = 0;
  double err = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::fabs(got[i] - want[i]) > err) err = std::fabs(got[i] - want[i]), worst = i;
  INFO(what << ": largest error " << err << " at " << worst << " (got " << got[worst] << ", want " << want[worst] << "), scale "
            << scale);
  CHECK(err <= rel * scale + 1e-6);
}

}  // namespace hpcnn::test
