#include "data/augment_volume.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace hpcnn::data {

VolumeDraw draw_volume_augment(const Augmentation& o, std::mt19937_64& rng) {
  static constexpr std::array<std::array<int, 3>, 6> kOrders{
      {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}};
  VolumeDraw d;
  if (o.random_flips_3d)
    for (bool& f : d.flip) f = (rng() >> 63) != 0;
  if (o.random_axis_permutation) d.perm = kOrders[rng() % kOrders.size()];
  return d;
}

namespace {

// `s` gives the dimensions of the volume at `src`: the whole sample, or the slab of it that
// input_slab() names (its axis shortened to the slab's planes).
template <bool kLog1p, class T>
void transform(const T* src, const SampleInfo& s, const VolumeDraw& d, const Normalizer& norm, float* dst) {
  const std::array<int64_t, 3> n{s.depth, s.height, s.width};
  const std::array<int64_t, 3> stride{s.height * s.width, s.width, 1};
  // Input offset of output voxel (o0, o1, o2): base + sum_k o_k * step[k].
  int64_t base = 0;
  std::array<int64_t, 3> step{}, extent{};
  for (int k = 0; k < 3; ++k) {
    const int a = d.perm[static_cast<size_t>(k)];
    extent[static_cast<size_t>(k)] = n[static_cast<size_t>(a)];
    step[static_cast<size_t>(k)] = d.flip[static_cast<size_t>(a)] ? -stride[static_cast<size_t>(a)] : stride[static_cast<size_t>(a)];
  }
  for (int a = 0; a < 3; ++a)
    if (d.flip[static_cast<size_t>(a)]) base += (n[static_cast<size_t>(a)] - 1) * stride[static_cast<size_t>(a)];
  const int64_t P = s.depth * s.height * s.width;
  for (int64_t c = 0; c < s.channels; ++c) {
    const float scale = norm.scale(c), bias = norm.bias(c);
    const T* in = src + c * P + base;
    float* out = dst + c * P;
    for (int64_t i = 0; i < extent[0]; ++i)
      for (int64_t j = 0; j < extent[1]; ++j) {
        const T* row = in + i * step[0] + j * step[1];
        for (int64_t k = 0; k < extent[2]; ++k) {
          const float v = static_cast<float>(row[k * step[2]]);
          *out++ = (kLog1p ? std::log1p(v) : v) * scale + bias;
        }
      }
  }
}

template <class T>
void dispatch(const void* src, const SampleInfo& s, const VolumeDraw& d, const Normalizer& norm, float* dst) {
  if (norm.log1p())
    transform<true>(static_cast<const T*>(src), s, d, norm, dst);
  else
    transform<false>(static_cast<const T*>(src), s, d, norm, dst);
}

void check_permutable(const SampleInfo& s, const VolumeDraw& d, const char* what) {
  if (!s.volume()) throw_error(ErrorKind::usage, std::string(what) + ": " + to_string(s) + " is not a volume");
  const bool permuted = d.perm != std::array<int, 3>{0, 1, 2};
  if (permuted && !(s.depth == s.height && s.height == s.width))
    throw_error(ErrorKind::usage, std::string(what) + ": permuting the axes of a " + to_string(s) + " volume, which is not a cube");
}

void run(const void* src, const SampleInfo& s, const VolumeDraw& d, const Normalizer& norm, float* dst) {
  switch (s.type) {
    case PixelType::u8:
      return dispatch<uint8_t>(src, s, d, norm, dst);
    case PixelType::i16:
      return dispatch<int16_t>(src, s, d, norm, dst);
    case PixelType::f32:
      return dispatch<float>(src, s, d, norm, dst);
  }
}

}  // namespace

void transform_volume(const void* src, const SampleInfo& s, const VolumeDraw& d, const Normalizer& norm, float* dst) {
  check_permutable(s, d, "transform_volume");
  run(src, s, d, norm, dst);
}

SampleBox input_slab(const SampleInfo& s, const VolumeDraw& d, int64_t first, int64_t count) {
  check_permutable(s, d, "input_slab");
  if (first < 0 || count < 1 || first + count > s.depth)
    throw_error(ErrorKind::usage, "input_slab: planes [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                      ") outside the depth " + std::to_string(s.depth) + " of " + to_string(s));
  const int a = d.perm[0];
  const int64_t n = a == 0 ? s.depth : a == 1 ? s.height : s.width;
  return SampleBox{a, d.flip[static_cast<size_t>(a)] ? n - first - count : first, count};
}

void transform_volume_slab(const void* src, const SampleInfo& s, const VolumeDraw& d, const Normalizer& norm, int64_t first,
                           int64_t count, float* dst) {
  run(src, box_info(s, input_slab(s, d, first, count)), d, norm, dst);
}

}  // namespace hpcnn::data
