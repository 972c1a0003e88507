// Tests of data/augment_volume.h: the cube's flips and axis permutations against NumPy's
// transpose(flip(x)), log1p normalisation, the draws, and the option checks of 2-D/3-D samples.
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "data/augment_volume.h"
#include "helpers.h"

using namespace hpcnn::data;
using data_test::error_of;
using hpcnn::ErrorKind;

namespace {

const SampleInfo kCube{2, 3, 3, PixelType::i16, 3, 3};  // C 2, D = H = W = 3, int16

std::vector<float> apply(const VolumeDraw& d, const Normalizer& n) {
  std::vector<int16_t> x(54);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int16_t>(i);
  std::vector<float> out(54);
  transform_volume(x.data(), kCube, d, n, out.data());
  return out;
}

std::vector<float> floats(std::initializer_list<int> v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("augment volume: flips and permutations are NumPy's transpose(flip(x))", "[data][augment]") {
  const Normalizer id(kCube, {}, {});
  CHECK(apply(VolumeDraw{}, id) == floats({0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17,
                                           18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35,
                                           36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53}));
  // The literals are NumPy's output (np.transpose(np.flip(x, flipped), (0, 1 + perm...)) of
  // x = np.arange(54).reshape(2, 3, 3, 3)).
  CHECK(apply({{true, false, false}, {0, 1, 2}}, id) ==
        floats({18, 19, 20, 21, 22, 23, 24, 25, 26, 9,  10, 11, 12, 13, 14, 15, 16, 17, 0,  1,  2,  3,  4,  5,  6,  7,  8,
                45, 46, 47, 48, 49, 50, 51, 52, 53, 36, 37, 38, 39, 40, 41, 42, 43, 44, 27, 28, 29, 30, 31, 32, 33, 34, 35}));
  CHECK(apply({{false, false, false}, {2, 0, 1}}, id) ==
        floats({0,  3,  6,  9,  12, 15, 18, 21, 24, 1,  4,  7,  10, 13, 16, 19, 22, 25, 2,  5,  8,  11, 14, 17, 20, 23, 26,
                27, 30, 33, 36, 39, 42, 45, 48, 51, 28, 31, 34, 37, 40, 43, 46, 49, 52, 29, 32, 35, 38, 41, 44, 47, 50, 53}));
  CHECK(apply({{true, false, true}, {1, 2, 0}}, id) ==
        floats({20, 11, 2,  19, 10, 1,  18, 9,  0,  23, 14, 5,  22, 13, 4,  21, 12, 3,  26, 17, 8,  25, 16, 7,  24, 15, 6,
                47, 38, 29, 46, 37, 28, 45, 36, 27, 50, 41, 32, 49, 40, 31, 48, 39, 30, 53, 44, 35, 52, 43, 34, 51, 42, 33}));
}

TEST_CASE("augment volume: log1p then mean and std per channel", "[data][augment]") {
  const Normalizer n(kCube, {0.5f, 1.0f}, {2.0f, 4.0f}, true);
  const std::vector<float> out = apply(VolumeDraw{}, n);
  CHECK(out[5] == Approx((std::log1p(5.0) - 0.5) / 2.0).epsilon(1e-6));
  CHECK(out[27 + 7] == Approx((std::log1p(34.0) - 1.0) / 4.0).epsilon(1e-6));
  // u8 volumes with log1p skip the /255 (log1p of the stored count).
  const SampleInfo u8{1, 2, 2, PixelType::u8, 2, 3};
  const std::vector<uint8_t> x(8, 3);
  std::vector<float> o(8);
  transform_volume(x.data(), u8, VolumeDraw{}, Normalizer(u8, {}, {}, true), o.data());
  CHECK(o[0] == Approx(std::log1p(3.0)).epsilon(1e-6));
}

TEST_CASE("augment volume: the draws cover the 8 flips and 6 orders; off draws nothing", "[data][augment]") {
  Augmentation on;
  on.random_flips_3d = on.random_axis_permutation = true;
  std::set<std::array<int, 3>> orders;
  std::set<int> flips;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 400; ++i) {
    const VolumeDraw d = draw_volume_augment(on, rng);
    orders.insert(d.perm);
    flips.insert(d.flip[0] * 4 + d.flip[1] * 2 + d.flip[2]);
  }
  CHECK(orders.size() == 6);
  CHECK(flips.size() == 8);
  std::mt19937_64 a(3), b(3);
  const VolumeDraw none = draw_volume_augment(Augmentation{}, a);
  CHECK(none.perm == std::array<int, 3>{0, 1, 2});
  CHECK(a() == b());  // no random number was used
}

TEST_CASE("augment volume: options that do not fit the samples are refused", "[data][augment]") {
  const SampleInfo image{3, 8, 8, PixelType::u8};
  const SampleInfo slab{4, 8, 8, PixelType::i16, 4, 3};  // D 4 != H 8: not a cube
  Augmentation flips3d;
  flips3d.random_flips_3d = true;
  CHECK(error_of([&] { check_augment_for(flips3d, image); }, ErrorKind::usage).find("random_flips_3d is an augmentation of 3-D volumes") !=
        std::string::npos);
  check_augment_for(flips3d, slab);  // flips need no cube
  Augmentation perm;
  perm.random_axis_permutation = true;
  CHECK(error_of([&] { check_augment_for(perm, slab); }, ErrorKind::usage).find("needs cubes (D = H = W); the volumes are 4x4x8x8 i16") !=
        std::string::npos);
  Augmentation pad;
  pad.crop_padding = 2;
  CHECK(error_of([&] { check_augment_for(pad, kCube); }, ErrorKind::usage).find("augmentation.crop_padding is an augmentation of 2-D images") !=
        std::string::npos);
  std::vector<float> out(static_cast<size_t>(slab.numel()));
  std::vector<int16_t> x(static_cast<size_t>(slab.numel()));
  CHECK(error_of([&] { transform_volume(x.data(), slab, {{false, false, false}, {1, 0, 2}}, Normalizer(slab, {}, {}), out.data()); }, ErrorKind::usage)
            .find("not a cube") != std::string::npos);
}
