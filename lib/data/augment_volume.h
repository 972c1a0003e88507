// hpcnn data: the training augmentations of 3-D volumes (C x D x H x W samples: CosmoFlow's
// particle counts) and their normalisation.
//
// A cube of a periodic, statistically isotropic universe keeps its physics under the 48
// symmetries of the cube: mirroring any of the three spatial axes and permuting them (the MLPerf
// HPC CosmoFlow reference applies random flips and axis transposes). In training, per sample:
//   1. flips: for each input axis a of (D, H, W), with random_flips_3d, mirror it with
//      probability 1/2 (the top bit of one rng() draw per axis, D first);
//   2. permutation: with random_axis_permutation, output axis k is input axis perm[k], perm one of
//      the 6 orders of (0, 1, 2) in lexicographic order, drawn as rng() % 6 (cubes only);
//   3. normalise as data/augment.h step 3 (log1p, mean, std).
// As numpy: out = transpose(flip(x, flipped axes), (0, 1 + perm[0], 1 + perm[1], 1 + perm[2])).
// Off (evaluation, or the Final Polishing epochs) only step 3 runs.
#pragma once

#include <array>
#include <random>

#include "data/augment.h"

namespace hpcnn::data {

struct VolumeDraw {
  std::array<bool, 3> flip{false, false, false};  // mirror input axis D, H, W
  std::array<int, 3> perm{0, 1, 2};               // output axis k = input axis perm[k]
};

// The draws of steps 1 and 2 (an option that is off consumes no random numbers).
VolumeDraw draw_volume_augment(const Augmentation& options, std::mt19937_64& rng);

// One volume `src` (sample.bytes() bytes, u8, i16 or float, CDHW) to `dst` (sample.numel()
// floats, CDHW with the permuted spatial order). ErrorKind::usage for a permutation of a
// non-cube or an image sample.
void transform_volume(const void* src, const SampleInfo& sample, const VolumeDraw& draw, const Normalizer& norm, float* dst);

// The spatial split (nn/spatial.h) needs output planes [first, first + count) along D alone. Output
// axis 0 is input axis perm[0], mirrored when it is flipped, so those planes come from the slab of
// the input along that axis returned here: planes [first, first + count), or [n - first - count,
// n - first) when mirrored. ErrorKind::usage for planes outside the depth, an image sample, or a
// permutation of a non-cube.
SampleBox input_slab(const SampleInfo& sample, const VolumeDraw& draw, int64_t first, int64_t count);
// `src`: that input slab (box_info(sample, input_slab(...)).bytes() bytes, CDHW of the slab) to
// `dst`: C x count x (the other two output axes) floats, equal to planes [first, first + count)
// of transform_volume's output.
void transform_volume_slab(const void* src, const SampleInfo& sample, const VolumeDraw& draw, const Normalizer& norm, int64_t first,
                           int64_t count, float* dst);

}  // namespace hpcnn::data
