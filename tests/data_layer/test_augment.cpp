// Tests of data/augment.h: crop with padding, horizontal flip, normalisation, determinism.
#include <catch2/catch.hpp>

#include <set>

#include "data/augment.h"
#include "helpers.h"

using namespace hpcnn::data;
using data_test::error_of;
using hpcnn::ErrorKind;

namespace {

// C x H x W floats with distinct values.
std::vector<float> ramp(const SampleInfo& s) {
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f - 3.0f;
  return v;
}

std::vector<float> run(const void* src, const SampleInfo& s, int pad, AugmentDraw d, const Normalizer& n) {
  std::vector<float> out(static_cast<size_t>(s.numel()));
  transform_sample(src, s, pad, d, n, out.data());
  return out;
}

}  // namespace

TEST_CASE("augment: flipping twice is the identity", "[data][augment]") {
  const SampleInfo s{2, 3, 5, PixelType::f32};
  const std::vector<float> x = ramp(s);
  const Normalizer id(s, {}, {});
  const std::vector<float> once = run(x.data(), s, 0, {0, 0, true}, id);
  CHECK(once != x);
  // Row 0 of channel 0 is mirrored.
  for (int w = 0; w < 5; ++w) CHECK(once[static_cast<size_t>(w)] == x[static_cast<size_t>(4 - w)]);
  CHECK(run(once.data(), s, 0, {0, 0, true}, id) == x);
}

TEST_CASE("augment: crop with padding 0 (or the centre offset) is the identity", "[data][augment]") {
  const SampleInfo s{3, 4, 6, PixelType::f32};
  const std::vector<float> x = ramp(s);
  const Normalizer id(s, {}, {});
  CHECK(run(x.data(), s, 0, {0, 0, false}, id) == x);
  CHECK(run(x.data(), s, 2, {2, 2, false}, id) == x);
  // augment_sample with pad 0 and no flip consumes no randomness and changes nothing.
  AugmentOptions o;
  std::mt19937_64 rng(7), fresh(7);
  std::vector<float> out(x.size());
  augment_sample(x.data(), s, o, id, true, rng, out.data());
  CHECK(out == x);
  CHECK(rng() == fresh());
}

TEST_CASE("augment: crop offsets shift the image over zero padding", "[data][augment]") {
  const SampleInfo s{1, 4, 4, PixelType::u8};
  std::vector<uint8_t> x(16);
  for (int i = 0; i < 16; ++i) x[static_cast<size_t>(i)] = static_cast<uint8_t>(10 + i);
  const Normalizer raw(s, {0.0f}, {1.0f / 255.0f});  // x/255 / (1/255) = x
  // off (0, 0) with pad 2: output (y, x) = input (y-2, x-2), zero outside.
  const std::vector<float> a = run(x.data(), s, 2, {0, 0, false}, raw);
  for (int y = 0; y < 4; ++y)
    for (int xx = 0; xx < 4; ++xx) {
      const float want = (y >= 2 && xx >= 2) ? 10.0f + static_cast<float>((y - 2) * 4 + (xx - 2)) : 0.0f;
      CHECK(a[static_cast<size_t>(y * 4 + xx)] == Approx(want).margin(1e-4));
    }
  // off (3, 1) with pad 2 and a flip: output (y, x) = input (y+1, (3-x)-1).
  const std::vector<float> b = run(x.data(), s, 2, {3, 1, true}, raw);
  for (int y = 0; y < 4; ++y)
    for (int xx = 0; xx < 4; ++xx) {
      const int sy = y + 1, sx = (3 - xx) - 1;
      const float want = (sy < 4 && sx >= 0) ? 10.0f + static_cast<float>(sy * 4 + sx) : 0.0f;
      CHECK(b[static_cast<size_t>(y * 4 + xx)] == Approx(want).margin(1e-4));
    }
}

TEST_CASE("augment: normalisation is (x/255 - mean[c]) / std[c] for u8, (x - mean) / std for fp32", "[data][augment]") {
  const SampleInfo s{3, 1, 2, PixelType::u8};
  const std::vector<uint8_t> x = {0, 255, 51, 102, 255, 0};
  const std::vector<float> mean = {0.5f, 0.25f, 0.0f}, sd = {0.25f, 0.5f, 2.0f};
  const std::vector<float> out = run(x.data(), s, 0, {}, Normalizer(s, mean, sd));
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 2; ++i) {
      const size_t k = static_cast<size_t>(c * 2 + i);
      CHECK(out[k] == Approx((x[k] / 255.0 - mean[static_cast<size_t>(c)]) / sd[static_cast<size_t>(c)]).epsilon(1e-6));
    }
  CHECK(out[0] == Approx(-2.0));
  CHECK(out[1] == Approx(2.0));
  // Padding pixels are zeros before normalisation: -mean/std.
  const std::vector<float> padded = run(x.data(), s, 1, {0, 0, false}, Normalizer(s, mean, sd));
  CHECK(padded[0] == Approx(-2.0));
  // fp32 pixels are not divided by 255; one mean/std value serves every channel.
  const SampleInfo f{2, 1, 1, PixelType::f32};
  const std::vector<float> fx = {3.0f, -1.0f};
  const std::vector<float> fo = run(fx.data(), f, 0, {}, Normalizer(f, {1.0f}, {2.0f}));
  CHECK(fo == std::vector<float>{1.0f, -1.0f});
  // Bad options.
  error_of([&] { Normalizer(s, {0.1f, 0.2f}, {}); }, ErrorKind::usage);
  error_of([&] { Normalizer(s, {}, {1.0f, 0.0f, 1.0f}); }, ErrorKind::usage);
  AugmentOptions neg;
  neg.pad = -1;
  std::mt19937_64 rng(1);
  error_of([&] { draw_augment(neg, rng); }, ErrorKind::usage);
}

TEST_CASE("augment: draws are deterministic for a seed and cover the range", "[data][augment]") {
  AugmentOptions o;
  o.pad = 4;
  o.flip = true;
  std::mt19937_64 a(42), b(42), c(43);
  std::set<int> offsets;
  int flips = 0, differ = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    const AugmentDraw da = draw_augment(o, a), db = draw_augment(o, b), dc = draw_augment(o, c);
    REQUIRE(da.off_y == db.off_y);
    REQUIRE(da.off_x == db.off_x);
    REQUIRE(da.flip == db.flip);
    differ += (da.off_y != dc.off_y || da.off_x != dc.off_x || da.flip != dc.flip);
    REQUIRE(da.off_y >= 0);
    REQUIRE(da.off_y <= 8);
    REQUIRE(da.off_x >= 0);
    REQUIRE(da.off_x <= 8);
    offsets.insert(da.off_y);
    flips += da.flip;
  }
  CHECK(offsets.size() == 9);
  CHECK(flips > n * 45 / 100);
  CHECK(flips < n * 55 / 100);
  CHECK(differ > n / 2);
  // Augmentation off: normalisation only, no random numbers consumed.
  const SampleInfo s{1, 2, 2, PixelType::f32};
  const std::vector<float> x = {1, 2, 3, 4};
  std::vector<float> out(4);
  std::mt19937_64 r(5), r0(5);
  augment_sample(x.data(), s, o, Normalizer(s, {}, {}), false, r, out.data());
  CHECK(out == x);
  CHECK(r() == r0());
}
