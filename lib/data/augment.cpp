#include "data/augment.h"

#include <cmath>

#include "core/error.h"

namespace hpcnn::data {

AugmentDraw draw_augment(const AugmentOptions& o, std::mt19937_64& rng) {
  if (o.pad < 0) throw_error(ErrorKind::usage, "augmentation: crop padding must be >= 0, got " + std::to_string(o.pad));
  AugmentDraw d;
  if (o.pad > 0) {
    const uint64_t span = 2 * static_cast<uint64_t>(o.pad) + 1;
    d.off_y = static_cast<int>(rng() % span);
    d.off_x = static_cast<int>(rng() % span);
  }
  if (o.flip) d.flip = (rng() >> 63) != 0;
  return d;
}

Normalizer::Normalizer(const SampleInfo& sample, const std::vector<float>& mean, const std::vector<float>& std) {
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
  const float unit = sample.type == PixelType::u8 ? 1.0f / 255.0f : 1.0f;
  for (size_t c = 0; c < C; ++c) {
    const float m = pick(mean, 0.0f, "mean", c), s = pick(std, 1.0f, "std", c);
    if (!(s > 0.0f) || !std::isfinite(s))
      throw_error(ErrorKind::usage, "normalisation: std of channel " + std::to_string(c) + " must be positive, got " +
                                        std::to_string(s));
    if (!std::isfinite(m))
      throw_error(ErrorKind::usage, "normalisation: mean of channel " + std::to_string(c) + " is not finite");
    scale_.push_back(unit / s);
    bias_.push_back(-m / s);
  }
}

namespace {

template <class T>
void transform(const T* src, const SampleInfo& s, int pad, const AugmentDraw& d, const Normalizer& norm, float* dst) {
  const int64_t H = s.height, W = s.width;
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
        for (int64_t x = 0; x < W; ++x) row[x] = static_cast<float>(in[x]) * a + b;
        continue;
      }
      for (int64_t x = 0; x < W; ++x) {
        const int64_t sx = (d.flip ? W - 1 - x : x) + dx;
        row[x] = (sx < 0 || sx >= W) ? b : static_cast<float>(in[sx]) * a + b;
      }
    }
  }
}

}  // namespace

void transform_sample(const void* src, const SampleInfo& s, int pad, const AugmentDraw& d, const Normalizer& norm,
                      float* dst) {
  if (s.type == PixelType::u8)
    transform(static_cast<const uint8_t*>(src), s, pad, d, norm, dst);
  else
    transform(static_cast<const float*>(src), s, pad, d, norm, dst);
}

void augment_sample(const void* src, const SampleInfo& s, const AugmentOptions& o, const Normalizer& norm, bool augment,
                    std::mt19937_64& rng, float* dst) {
  if (!augment) {
    transform_sample(src, s, 0, AugmentDraw{}, norm, dst);
    return;
  }
  transform_sample(src, s, o.pad, draw_augment(o, rng), norm, dst);
}

}  // namespace hpcnn::data
