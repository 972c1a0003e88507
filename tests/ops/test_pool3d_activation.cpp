// The CPU fast paths of two memory-bound ops of 3-D CNNs against their definitions written as plain
// loops here: MaxPool 3-D over windows that need no clipping (kernel 2 / stride 2 and a 3x2x2 kernel
// with stride 2: the maximum, the argmax = the first maximal tap in D, H, W order, and the backward
// scatter), on inputs with many ties; and LeakyRelu forward and backward (the vectorized loops),
// on both sides of the parallel threshold and at -0, +0 and NaN.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "ops/kernels.h"

using namespace hpcnn;
using namespace hpcnn::ops;

namespace {

// Small integers: many windows hold their maximum twice or more (the tie rule matters).
Tensor ties(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> u(-3, 3);
  Tensor t(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(u(rng));
  return t;
}

void check_maxpool(const Shape& xs, std::array<int64_t, 3> k, std::array<int64_t, 3> st) {
  const Tensor x = ties(xs, 7);
  Pool3dParams p;
  p.kernel = k;
  p.stride = st;
  const int64_t D = xs[2], H = xs[3], W = xs[4];
  const int64_t OD = (D - k[0]) / st[0] + 1, OH = (H - k[1]) / st[1] + 1, OW = (W - k[2]) / st[2] + 1;
  MaxPoolSaved saved;
  const Tensor y = maxpool3d_forward(x, p, &saved);
  REQUIRE(y.shape() == Shape{xs[0], xs[1], OD, OH, OW});
  const Tensor gy = ties(y.shape(), 9);
  const Tensor gx = maxpool3d_backward(xs, saved, gy);
  std::vector<float> gx_ref(static_cast<size_t>(x.numel()), 0.0f);
  int64_t o = 0;
  for (int64_t pl = 0; pl < xs[0] * xs[1]; ++pl)
    for (int64_t od = 0; od < OD; ++od)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow, ++o) {
          float best = -std::numeric_limits<float>::infinity();
          int64_t at = -1;
          for (int64_t a = 0; a < k[0]; ++a)
            for (int64_t b = 0; b < k[1]; ++b)
              for (int64_t c = 0; c < k[2]; ++c) {
                const int64_t i = ((od * st[0] + a) * H + oh * st[1] + b) * W + ow * st[2] + c;
                const float v = x.data()[pl * D * H * W + i];
                if (at < 0 || v > best) best = v, at = i;
              }
          REQUIRE(y.data()[o] == best);
          REQUIRE(saved.argmax[static_cast<size_t>(o)] == at);
          gx_ref[static_cast<size_t>(pl * D * H * W + at)] += gy.data()[o];
        }
  for (int64_t i = 0; i < x.numel(); ++i) REQUIRE(gx.data()[i] == gx_ref[static_cast<size_t>(i)]);
}

}  // namespace

TEST_CASE("MaxPool 3-D without clipping equals its definition, ties to the first tap", "[ops][pool3d]") {
  check_maxpool({2, 3, 6, 8, 10}, {2, 2, 2}, {2, 2, 2});  // CosmoFlow's pooling
  check_maxpool({1, 2, 7, 6, 9}, {3, 2, 2}, {2, 2, 3});   // other kernels and strides, last planes unused
}

TEST_CASE("LeakyRelu forward and backward equal the definition", "[ops][eltwise]") {
  for (const int64_t n : {int64_t{1000}, int64_t{70000}}) {  // below and above the OpenMP threshold
    std::mt19937_64 rng(11);
    std::normal_distribution<float> u(0.0f, 1.0f);
    Tensor x({n}), gy({n});
    for (int64_t i = 0; i < n; ++i) x.data()[i] = u(rng), gy.data()[i] = u(rng);
    x.data()[0] = -0.0f;
    x.data()[1] = 0.0f;
    x.data()[2] = std::numeric_limits<float>::quiet_NaN();
    ActivationParams p;
    p.kind = Activation::leaky_relu;
    p.alpha = 0.3f;
    const Tensor y = activation_forward(x, p), gx = activation_backward(x, gy, p);
    for (int64_t i = 3; i < n; ++i) {
      const float v = x.data()[i], g = gy.data()[i];
      REQUIRE(y.data()[i] == (v >= 0.0f ? v : 0.3f * v));
      REQUIRE(gx.data()[i] == (v >= 0.0f ? g : 0.3f * g));
    }
    CHECK(std::signbit(y.data()[0]));  // -0 stays -0 (0.3 x -0 or -0 itself)
    CHECK(y.data()[1] == 0.0f);
    CHECK(std::isnan(y.data()[2]));
    CHECK(gx.data()[0] == gy.data()[0]);  // x >= 0 at both zeros: the gradient passes
    CHECK(gx.data()[1] == gy.data()[1]);
  }
}
