// Tests of data/augment.h: crop with padding, horizontal flip, normalisation, determinism.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
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
  Augmentation o;
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
  Augmentation neg;
  neg.crop_padding = -1;
  std::mt19937_64 rng(1);
  error_of([&] { draw_augment(neg, rng); }, ErrorKind::usage);
}

TEST_CASE("augment: draws are deterministic for a seed and cover the range", "[data][augment]") {
  Augmentation o;
  o.crop_padding = 4;
  o.horizontal_flip = true;
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

TEST_CASE("augment: the resized crop of the whole image is the identity; a window is resized bilinearly", "[data][augment]") {
  const SampleInfo s{2, 6, 8, PixelType::f32};
  // A plane linear in y and x: bilinear interpolation reproduces it exactly wherever the source
  // coordinate is not clamped, so the expected output is the plane at the mapped coordinates.
  std::vector<float> x(static_cast<size_t>(s.numel()));
  auto plane = [](int c, double y, double xx) { return 3.0 * y - 0.5 * xx + 10.0 * c; };
  for (int c = 0; c < 2; ++c)
    for (int y = 0; y < 6; ++y)
      for (int xx = 0; xx < 8; ++xx) x[static_cast<size_t>((c * 6 + y) * 8 + xx)] = static_cast<float>(plane(c, y, xx));
  const Normalizer id(s, {}, {});
  AugmentDraw whole;
  whole.crop_h = 6;
  whole.crop_w = 8;
  CHECK(run(x.data(), s, 0, whole, id) == x);
  for (bool flip : {false, true}) {
    AugmentDraw d;
    d.crop_y = 1, d.crop_x = 2, d.crop_h = 3, d.crop_w = 5, d.flip = flip;
    const std::vector<float> out = run(x.data(), s, 0, d, id);
    for (int c = 0; c < 2; ++c)
      for (int y = 0; y < 6; ++y)
        for (int xx = 0; xx < 8; ++xx) {
          const int ox = flip ? 7 - xx : xx;
          const double cy = std::clamp((y + 0.5) * 3.0 / 6.0 - 0.5, 0.0, 2.0) + 1;
          const double cx = std::clamp((ox + 0.5) * 5.0 / 8.0 - 0.5, 0.0, 4.0) + 2;
          CHECK(out[static_cast<size_t>((c * 6 + y) * 8 + xx)] == Approx(plane(c, cy, cx)).margin(1e-5));
        }
  }
  // u8 pixels are scaled and normalised after the interpolation.
  const SampleInfo u{1, 2, 2, PixelType::u8};
  const std::vector<uint8_t> px = {0, 100, 200, 255};
  AugmentDraw d;
  d.crop_h = 1, d.crop_w = 1, d.crop_y = 1, d.crop_x = 0;  // one pixel (200) blown up
  const std::vector<float> one = run(px.data(), u, 0, d, Normalizer(u, {0.5f}, {0.25f}));
  for (float v : one) CHECK(v == Approx((200 / 255.0 - 0.5) / 0.25).epsilon(1e-6));
  AugmentDraw outside;
  outside.crop_h = 2, outside.crop_w = 2, outside.crop_y = 1;
  error_of([&] { run(px.data(), u, 0, outside, Normalizer(u, {}, {})); }, ErrorKind::usage);
}

TEST_CASE("augment: random erasing zeroes one rectangle after normalisation and nothing else", "[data][augment]") {
  const SampleInfo s{2, 5, 7, PixelType::u8};
  std::vector<uint8_t> x(static_cast<size_t>(s.numel()));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(7 * i + 3);
  const Normalizer norm(s, {0.3f}, {0.2f});
  const std::vector<float> plain = run(x.data(), s, 0, {}, norm);
  AugmentDraw d;
  d.erase_y = 1, d.erase_x = 2, d.erase_h = 3, d.erase_w = 4;
  const std::vector<float> out = run(x.data(), s, 0, d, norm);
  for (int c = 0; c < 2; ++c)
    for (int y = 0; y < 5; ++y)
      for (int xx = 0; xx < 7; ++xx) {
        const size_t k = static_cast<size_t>((c * 5 + y) * 7 + xx);
        const bool inside = y >= 1 && y < 4 && xx >= 2 && xx < 6;
        CHECK(out[k] == (inside ? 0.0f : plain[k]));
      }
}

namespace {

// torchvision's RandomResizedCrop.get_params and RandomErasing.get_params (torchvision 0.15,
// transforms.py), transcribed line by line with the random primitives data/augment.h documents:
// the reference the draws must equal exactly.
struct TorchvisionReference {
  std::mt19937_64& rng;
  double uniform(double lo, double hi) { return lo + (hi - lo) * (static_cast<double>(rng() >> 11) * 0x1p-53); }
  int64_t randint(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo));
  }  // [lo, hi)
  static int64_t round(double x) { return static_cast<int64_t>(std::nearbyint(x)); }
  std::array<int64_t, 4> crop(int64_t height, int64_t width, std::array<double, 2> scale, std::array<double, 2> ratio) {
    const double area = static_cast<double>(height * width);
    const double log0 = std::log(ratio[0]), log1 = std::log(ratio[1]);
    for (int i = 0; i < 10; ++i) {
      const double target_area = area * uniform(scale[0], scale[1]);
      const double aspect_ratio = std::exp(uniform(log0, log1));
      const int64_t w = round(std::sqrt(target_area * aspect_ratio));
      const int64_t h = round(std::sqrt(target_area / aspect_ratio));
      if (0 < w && w <= width && 0 < h && h <= height) {
        const int64_t top = randint(0, height - h + 1);
        const int64_t left = randint(0, width - w + 1);
        return {top, left, h, w};
      }
    }
    const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
    int64_t w = width, h = height;
    if (in_ratio < ratio[0])
      h = round(static_cast<double>(w) / ratio[0]);
    else if (in_ratio > ratio[1])
      w = round(static_cast<double>(h) * ratio[1]);
    return {(height - h) / 2, (width - w) / 2, h, w};
  }
  std::array<int64_t, 4> erase(int64_t img_h, int64_t img_w, std::array<double, 2> scale, std::array<double, 2> ratio) {
    const double area = static_cast<double>(img_h * img_w);
    const double log0 = std::log(ratio[0]), log1 = std::log(ratio[1]);
    for (int i = 0; i < 10; ++i) {
      const double erase_area = area * uniform(scale[0], scale[1]);
      const double aspect_ratio = std::exp(uniform(log0, log1));
      const int64_t h = round(std::sqrt(erase_area * aspect_ratio));
      const int64_t w = round(std::sqrt(erase_area / aspect_ratio));
      if (!(h < img_h && w < img_w) || h < 1 || w < 1) continue;
      const int64_t top = randint(0, img_h - h + 1);
      const int64_t left = randint(0, img_w - w + 1);
      return {top, left, h, w};
    }
    return {0, 0, 0, 0};
  }
};

}  // namespace

TEST_CASE("augment: resized-crop and erasing draws are torchvision's, in range, with the erasing probability",
          "[data][augment]") {
  Augmentation o;
  o.resized_crop_scale = {0.35, 1.0};
  o.resized_crop_ratio = {0.75, 4.0 / 3.0};
  o.horizontal_flip = true;
  o.erasing_probability = 0.5;
  for (auto [H, W] : {std::pair<int64_t, int64_t>{28, 28}, {12, 40}}) {
    std::mt19937_64 a(9), b(9), ref_rng(9);
    TorchvisionReference ref{ref_rng};
    int erased = 0;
    const int n = 4000;
    for (int i = 0; i < n; ++i) {
      const AugmentDraw d = draw_augment(o, a, H, W), e = draw_augment(o, b, H, W);
      REQUIRE((d.crop_y == e.crop_y && d.crop_x == e.crop_x && d.crop_h == e.crop_h && d.crop_w == e.crop_w && d.flip == e.flip &&
               d.erase_y == e.erase_y && d.erase_h == e.erase_h && d.erase_x == e.erase_x && d.erase_w == e.erase_w));
      const auto crop = ref.crop(H, W, o.resized_crop_scale, o.resized_crop_ratio);
      REQUIRE(std::array<int64_t, 4>{d.crop_y, d.crop_x, d.crop_h, d.crop_w} == crop);
      REQUIRE(d.flip == ((ref_rng() >> 63) != 0));
      const bool erase = ref.uniform(0, 1) < o.erasing_probability;
      const auto rect = erase ? ref.erase(H, W, o.erasing_scale, o.erasing_ratio) : std::array<int64_t, 4>{0, 0, 0, 0};
      REQUIRE(std::array<int64_t, 4>{d.erase_y, d.erase_x, d.erase_h, d.erase_w} == rect);
      REQUIRE(d.crop_h >= 1);
      REQUIRE(d.crop_w >= 1);
      REQUIRE(d.crop_y + d.crop_h <= H);
      REQUIRE(d.crop_x + d.crop_w <= W);
      if (d.erase_h > 0) {
        ++erased;
        REQUIRE(d.erase_h < H);
        REQUIRE(d.erase_w < W);
        REQUIRE(d.erase_y + d.erase_h <= H);
        REQUIRE(d.erase_x + d.erase_w <= W);
      }
    }
    // About 4 sigma of the binomial; erasing tries that all fail leave a sample unerased.
    CHECK(erased > n / 2 - 200);
    CHECK(erased < n / 2 + 130);
  }
  // The defaults draw nothing: no random numbers are consumed.
  std::mt19937_64 r(3), r0(3);
  draw_augment(Augmentation{}, r, 28, 28);
  CHECK(r() == r0());
}

TEST_CASE("augment: bad resized-crop and erasing options are usage errors", "[data][augment]") {
  std::mt19937_64 rng(1);
  auto bad = [&](auto edit) {
    Augmentation o;
    edit(o);
    error_of([&] { validate_augment(o); }, ErrorKind::usage);
  };
  bad([](Augmentation& o) { o.crop_padding = 2, o.resized_crop_scale = {0.5, 1.0}; });
  bad([](Augmentation& o) { o.resized_crop_scale = {0.0, 1.0}; });
  bad([](Augmentation& o) { o.resized_crop_scale = {0.8, 0.5}; });
  bad([](Augmentation& o) { o.resized_crop_scale = {0.5, 1.5}; });
  bad([](Augmentation& o) { o.resized_crop_ratio = {-1.0, 2.0}; });
  bad([](Augmentation& o) { o.erasing_probability = 1.5; });
  bad([](Augmentation& o) { o.erasing_probability = 0.5, o.erasing_scale = {0.1, 1.0}; });
  bad([](Augmentation& o) { o.erasing_probability = 0.5, o.erasing_ratio = {3.0, 0.3}; });
  bad([](Augmentation& o) { o.erasing_scale = {5.0, 1.0}; });  // checked while erasing is off too
  bad([](Augmentation& o) { o.resized_crop_scale = {0.5, 1.0}, o.resized_crop_ratio = {1.0, 1e300}; });
  bad([](Augmentation& o) { o.erasing_ratio = {1e-300, 1.0}; });
  try {  // the value as given, not rounded
    Augmentation o;
    o.erasing_probability = 1.0000001;
    validate_augment(o);
    FAIL("no error");
  } catch (const hpcnn::Error& e) {
    CHECK(std::string(e.what()).find("1.0000001") != std::string::npos);
  }
  Augmentation o;
  o.resized_crop_scale = {0.5, 1.0};
  error_of([&] { draw_augment(o, rng); }, ErrorKind::usage);  // no image size given
}
