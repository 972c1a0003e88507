#include "data/augment.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/augment_volume.h"

namespace hpcnn::data {

namespace {

// The shortest text that reads back as `v` (std::to_string would round 1.0000001 to 1.000000).
std::string exact(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// Aspect ratios beyond this are refused: sqrt(area * ratio) must stay a sensible pixel count.
constexpr double kMaxRatio = 1e4;

void check_range(const std::array<double, 2>& r, const char* what, double max, bool max_inclusive) {
  const bool ok =
      std::isfinite(r[0]) && std::isfinite(r[1]) && r[0] > 0 && r[0] <= r[1] && (max_inclusive ? r[1] <= max : r[1] < max);
  if (!ok)
    throw_error(ErrorKind::usage, std::string("augmentation: ") + what + " must be [min, max] with 0 < min <= max " +
                                      (max_inclusive ? "<= " : "< ") + exact(max) + ", got [" + exact(r[0]) + ", " + exact(r[1]) +
                                      "]");
}

void check_ratio(const std::array<double, 2>& r, const char* what) {
  check_range(r, what, kMaxRatio, true);
  if (r[0] < 1 / kMaxRatio)
    throw_error(ErrorKind::usage, std::string("augmentation: ") + what + " must lie in [" + exact(1 / kMaxRatio) + ", " +
                                      exact(kMaxRatio) + "], got [" + exact(r[0]) + ", " + exact(r[1]) + "]");
}

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1p-53; }
double uniform(std::mt19937_64& rng, const std::array<double, 2>& r) { return r[0] + (r[1] - r[0]) * uniform01(rng); }
double log_uniform(std::mt19937_64& rng, const std::array<double, 2>& r) {
  return std::exp(std::log(r[0]) + (std::log(r[1]) - std::log(r[0])) * uniform01(rng));
}
int64_t below(std::mt19937_64& rng, int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); }
int64_t round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }  // Python's round()

// torchvision's RandomResizedCrop.get_params, with this file's random draws.
void draw_resized_crop(const Augmentation& o, std::mt19937_64& rng, int64_t H, int64_t W, AugmentDraw& d) {
  const double area = static_cast<double>(H * W);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * uniform(rng, o.resized_crop_scale);
    const double ratio = log_uniform(rng, o.resized_crop_ratio);
    const int64_t w = round_half_even(std::sqrt(target * ratio)), h = round_half_even(std::sqrt(target / ratio));
    if (w > 0 && w <= W && h > 0 && h <= H) {
      d.crop_h = static_cast<int>(h);
      d.crop_w = static_cast<int>(w);
      d.crop_y = static_cast<int>(below(rng, H - h + 1));
      d.crop_x = static_cast<int>(below(rng, W - w + 1));
      return;
    }
  }
  const double in_ratio = static_cast<double>(W) / static_cast<double>(H);
  int64_t w = W, h = H;
  if (in_ratio < o.resized_crop_ratio[0])
    h = std::clamp<int64_t>(round_half_even(static_cast<double>(W) / o.resized_crop_ratio[0]), 1, H);
  else if (in_ratio > o.resized_crop_ratio[1])
    w = std::clamp<int64_t>(round_half_even(static_cast<double>(H) * o.resized_crop_ratio[1]), 1, W);
  d.crop_h = static_cast<int>(h);
  d.crop_w = static_cast<int>(w);
  d.crop_y = static_cast<int>((H - h) / 2);
  d.crop_x = static_cast<int>((W - w) / 2);
}

// torchvision's RandomErasing.get_params (value 0), with this file's random draws.
void draw_erasing(const Augmentation& o, std::mt19937_64& rng, int64_t H, int64_t W, AugmentDraw& d) {
  if (uniform01(rng) >= o.erasing_probability) return;
  const double area = static_cast<double>(H * W);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * uniform(rng, o.erasing_scale);
    const double ratio = log_uniform(rng, o.erasing_ratio);
    const int64_t h = round_half_even(std::sqrt(target * ratio)), w = round_half_even(std::sqrt(target / ratio));
    if (h < 1 || w < 1 || h >= H || w >= W) continue;
    d.erase_h = static_cast<int>(h);
    d.erase_w = static_cast<int>(w);
    d.erase_y = static_cast<int>(below(rng, H - h + 1));
    d.erase_x = static_cast<int>(below(rng, W - w + 1));
    return;
  }
}

}  // namespace

void validate_augment(const Augmentation& o) {
  if (o.crop_padding < 0)
    throw_error(ErrorKind::usage, "augmentation: crop padding must be >= 0, got " + std::to_string(o.crop_padding));
  check_range(o.resized_crop_scale, "the resized crop's scale", 1.0, true);
  check_ratio(o.resized_crop_ratio, "the resized crop's ratio");
  if (o.crop_padding > 0 && o.resized_crop())
    throw_error(ErrorKind::usage, "augmentation: a crop with padding and a random resized crop exclude each other (set one)");
  if (!(o.erasing_probability >= 0 && o.erasing_probability <= 1))
    throw_error(ErrorKind::usage, "augmentation: the erasing probability must be in [0, 1], got " + exact(o.erasing_probability));
  check_range(o.erasing_scale, "the erasing scale", 1.0, false);
  check_ratio(o.erasing_ratio, "the erasing ratio");
}

AugmentDraw draw_augment(const Augmentation& o, std::mt19937_64& rng, int64_t H, int64_t W) {
  validate_augment(o);
  AugmentDraw d;
  if (o.crop_padding > 0) {
    const uint64_t span = 2 * static_cast<uint64_t>(o.crop_padding) + 1;
    d.off_y = static_cast<int>(rng() % span);
    d.off_x = static_cast<int>(rng() % span);
  }
  if ((o.resized_crop() || o.erasing_probability > 0) && (H < 1 || W < 1))
    throw_error(ErrorKind::usage, "augmentation: the resized crop and erasing need the image size");
  if (o.resized_crop()) draw_resized_crop(o, rng, H, W, d);
  if (o.horizontal_flip) d.flip = (rng() >> 63) != 0;
  if (o.erasing_probability > 0) draw_erasing(o, rng, H, W, d);
  return d;
}

Normalizer::Normalizer(const SampleInfo& sample, const std::vector<float>& mean, const std::vector<float>& std, bool log1p)
    : log1p_(log1p) {
  const auto C = static_cast<size_t>(sample.channels);
  auto pick = [&](const std::vector<float>& v, float dflt, const char* what, size_t c) {
    if (v.empty()) return dflt;
    if (v.size() == 1) return v[0];
    if (v.size() != C)
      throw_error(ErrorKind::usage, std::string("normalisation: ") + what + " has " + std::to_string(v.size()) +
                                        " values, the images have " + std::to_string(C) + " channels (give 1 or " +
                                        std::to_string(C) + ")");
    return v[c];
  };
  const float unit = sample.type == PixelType::u8 && !log1p ? 1.0f / 255.0f : 1.0f;
  for (size_t c = 0; c < C; ++c) {
    const float m = pick(mean, 0.0f, "mean", c), s = pick(std, 1.0f, "std", c);
    if (!(s > 0.0f) || !std::isfinite(s))
      throw_error(ErrorKind::usage,
                  "normalisation: std of channel " + std::to_string(c) + " must be positive, got " + std::to_string(s));
    if (!std::isfinite(m))
      throw_error(ErrorKind::usage, "normalisation: mean of channel " + std::to_string(c) + " is not finite");
    scale_.push_back(unit / s);
    bias_.push_back(-m / s);
  }
}

namespace {

// A stored value before the affine map: log(1 + x) with log1p, else x.
template <bool kLog1p, class T>
float value(T x) {
  const auto v = static_cast<float>(x);
  return kLog1p ? std::log1p(v) : v;
}

// The resized crop: bilinear, half-pixel centres, source coordinates clamped to the window.
template <bool kLog1p, class T>
void resize_crop(const T* src, const SampleInfo& s, const AugmentDraw& d, const Normalizer& norm, float* dst) {
  const int64_t H = s.height, W = s.width;
  const double sy = static_cast<double>(d.crop_h) / static_cast<double>(H),
               sx = static_cast<double>(d.crop_w) / static_cast<double>(W);
  struct Tap {
    int64_t i0, i1;
    float f;  // weight of i1
  };
  auto taps = [](int64_t n, double scale, int64_t size) {
    std::vector<Tap> t(static_cast<size_t>(n));
    for (int64_t o = 0; o < n; ++o) {
      const double c = std::clamp((static_cast<double>(o) + 0.5) * scale - 0.5, 0.0, static_cast<double>(size - 1));
      const auto i0 = static_cast<int64_t>(c);
      t[static_cast<size_t>(o)] = {i0, std::min(i0 + 1, size - 1), static_cast<float>(c - static_cast<double>(i0))};
    }
    return t;
  };
  const std::vector<Tap> ty = taps(H, sy, d.crop_h), tx = taps(W, sx, d.crop_w);
  for (int64_t c = 0; c < s.channels; ++c) {
    const float a = norm.scale(c), b = norm.bias(c);
    const T* plane = src + c * H * W + static_cast<int64_t>(d.crop_y) * W + d.crop_x;
    float* out = dst + c * H * W;
    for (int64_t y = 0; y < H; ++y) {
      const Tap& v = ty[static_cast<size_t>(y)];
      const T* r0 = plane + v.i0 * W;
      const T* r1 = plane + v.i1 * W;
      for (int64_t x = 0; x < W; ++x) {
        const Tap& h = tx[static_cast<size_t>(d.flip ? W - 1 - x : x)];
        const float a0 = value<kLog1p>(r0[h.i0]), a1 = value<kLog1p>(r0[h.i1]);
        const float b0 = value<kLog1p>(r1[h.i0]), b1 = value<kLog1p>(r1[h.i1]);
        const float top = a0 + h.f * (a1 - a0), bot = b0 + h.f * (b1 - b0);
        out[y * W + x] = (top + v.f * (bot - top)) * a + b;
      }
    }
  }
}

template <bool kLog1p, class T>
void transform(const T* src, const SampleInfo& s, int pad, const AugmentDraw& d, const Normalizer& norm, float* dst) {
  const int64_t H = s.height, W = s.width;
  if (d.crop_h > 0) {
    if (d.crop_h > H || d.crop_w < 1 || d.crop_w > W || d.crop_y < 0 || d.crop_x < 0 || d.crop_y + d.crop_h > H ||
        d.crop_x + d.crop_w > W)
      throw_error(ErrorKind::usage, "augmentation: resized crop window outside the image");
    return resize_crop<kLog1p>(src, s, d, norm, dst);
  }
  const int64_t dy = d.off_y - pad, dx = d.off_x - pad;  // source = output + shift
  for (int64_t c = 0; c < s.channels; ++c) {
    const float a = norm.scale(c), b = norm.bias(c);
    const T* plane = src + c * H * W;
    float* out = dst + c * H * W;
    for (int64_t y = 0; y < H; ++y) {
      const int64_t sy = y + dy;
      float* row = out + y * W;
      if (sy < 0 || sy >= H) {
        for (int64_t x = 0; x < W; ++x) row[x] = b;  // a zero pixel, normalised
        continue;
      }
      const T* in = plane + sy * W;
      if (!d.flip && dx == 0) {
        for (int64_t x = 0; x < W; ++x) row[x] = value<kLog1p>(in[x]) * a + b;
        continue;
      }
      for (int64_t x = 0; x < W; ++x) {
        const int64_t sx = (d.flip ? W - 1 - x : x) + dx;
        row[x] = (sx < 0 || sx >= W) ? b : value<kLog1p>(in[sx]) * a + b;
      }
    }
  }
}

template <class T>
void transform_typed(const void* src, const SampleInfo& s, int pad, const AugmentDraw& d, const Normalizer& norm, float* dst) {
  if (norm.log1p())
    transform<true>(static_cast<const T*>(src), s, pad, d, norm, dst);
  else
    transform<false>(static_cast<const T*>(src), s, pad, d, norm, dst);
}

}  // namespace

void check_augment_for(const Augmentation& o, const SampleInfo& s) {
  validate_augment(o);
  if (s.volume()) {
    const char* two_d = o.crop_padding > 0      ? "crop_padding"
                        : o.resized_crop()      ? "resized_crop_scale"
                        : o.horizontal_flip     ? "horizontal_flip"
                        : o.erasing_probability > 0 ? "erasing_probability"
                                                : nullptr;
    if (two_d)
      throw_error(ErrorKind::usage, std::string("augmentation.") + two_d + " is an augmentation of 2-D images; the samples are " +
                                        to_string(s) + " volumes (use augmentation.random_flips_3d and random_axis_permutation)");
    if (o.random_axis_permutation && !(s.depth == s.height && s.height == s.width))
      throw_error(ErrorKind::usage, "augmentation.random_axis_permutation needs cubes (D = H = W); the volumes are " + to_string(s));
  } else if (o.random_flips_3d || o.random_axis_permutation) {
    throw_error(ErrorKind::usage, std::string("augmentation.") + (o.random_flips_3d ? "random_flips_3d" : "random_axis_permutation") +
                                      " is an augmentation of 3-D volumes; the samples are " + to_string(s) + " images");
  }
}

void transform_sample(const void* src, const SampleInfo& s, int pad, const AugmentDraw& d, const Normalizer& norm, float* dst) {
  if (s.volume()) throw_error(ErrorKind::usage, "transform_sample: " + to_string(s) + " is a volume (data/augment_volume.h)");
  switch (s.type) {
    case PixelType::u8:
      transform_typed<uint8_t>(src, s, pad, d, norm, dst);
      break;
    case PixelType::i16:
      transform_typed<int16_t>(src, s, pad, d, norm, dst);
      break;
    case PixelType::f32:
      transform_typed<float>(src, s, pad, d, norm, dst);
      break;
  }
  if (d.erase_h > 0) {
    const int64_t H = s.height, W = s.width;
    if (d.erase_y < 0 || d.erase_x < 0 || d.erase_w < 1 || d.erase_y + d.erase_h > H || d.erase_x + d.erase_w > W)
      throw_error(ErrorKind::usage, "augmentation: erased rectangle outside the image");
    for (int64_t c = 0; c < s.channels; ++c)
      for (int64_t y = d.erase_y; y < d.erase_y + d.erase_h; ++y) std::fill_n(dst + (c * H + y) * W + d.erase_x, d.erase_w, 0.0f);
  }
}

void normalise_sample(const void* src, const SampleInfo& s, const Normalizer& norm, float* dst) {
  if (s.volume())
    transform_volume(src, s, VolumeDraw{}, norm, dst);
  else
    transform_sample(src, s, 0, AugmentDraw{}, norm, dst);
}

void augment_sample(const void* src, const SampleInfo& s, const Augmentation& o, const Normalizer& norm, bool augment,
                    std::mt19937_64& rng, float* dst) {
  if (!augment) return normalise_sample(src, s, norm, dst);
  if (s.volume()) return transform_volume(src, s, draw_volume_augment(o, rng), norm, dst);
  transform_sample(src, s, o.crop_padding, draw_augment(o, rng, s.height, s.width), norm, dst);
}

}  // namespace hpcnn::data
