// hpcnn data: per-sample augmentation for training (random crop with zero padding or random
// resized crop, random horizontal flip, random erasing) and normalisation, producing the fp32
// CHW values the network sees.
//
// The usual CIFAR/ImageNet recipe (torchvision RandomCrop(size, padding=P) or
// RandomResizedCrop(size, scale, ratio), RandomHorizontalFlip(), Normalize(mean, std),
// RandomErasing(p, scale, ratio, value=0)), in this order, for one sample of C x H x W:
//   1a. crop: pad the image with P zero pixels on every side (zero in the stored pixel scale:
//      black), then take the H x W window at offset (off_y, off_x), each uniform in [0, 2P];
//      off = P is the unshifted image;
//   1b. or random resized crop (Szegedy et al., "Going deeper with convolutions", CVPR 2015; as
//      torchvision draws it): up to 10 tries of an area fraction uniform in [scale] and an
//      aspect ratio w/h log-uniform in [ratio], w = round(sqrt(area * ratio)),
//      h = round(sqrt(area / ratio)); the first that fits is placed uniformly (top in
//      [0, H-h], left in [0, W-w]); if none fits, the largest centred window whose ratio is
//      clamped into [ratio]. The h x w window is resized back to H x W bilinearly with
//      half-pixel centres (source y = (y + 0.5) * h / H - 0.5, clamped to the window; no
//      antialiasing), as torchvision's tensor resize with antialias=False;
//   2. flip: with probability 1/2 mirror the columns (x -> W-1-x);
//   3. normalise: v = x / 255 for u8 pixels (x as stored for i16 and fp32 pixels; log(1 + x) for
//      any type when log1p is set), then (v - mean[c]) / std[c];
//   4. random erasing (Zhong et al., "Random erasing data augmentation", AAAI 2020; as
//      torchvision draws it): with probability p, up to 10 tries of an area fraction uniform in
//      [erasing scale] and a ratio log-uniform in [erasing ratio], eh = round(sqrt(area *
//      ratio)), ew = round(sqrt(area / ratio)); the first with eh < H and ew < W is placed
//      uniformly and set to 0 in every channel (0 after normalisation: the mean pixel); none
//      fits: nothing is erased.
// With augmentation off (evaluation, and the Final Polishing epochs of Kasagi et al., HPDC 2020,
// which train on non-augmented data) only step 3 runs.
// Random draws come from a std::mt19937_64 the caller seeds (data/loader.h seeds one per sample
// from the seed, epoch and sample index), so results are deterministic and independent of
// threads; integers are rng() % span, uniform reals (rng() >> 11) * 2^-53, and the flip is the
// top bit of rng(), not the implementation-defined std distributions, so they agree across
// standard libraries.
// Errors: ErrorKind::usage for a negative pad, a pad together with a resized crop, scale or ratio
// ranges that are not 0 < min <= max (scale max <= 1; erasing scale max < 1; ratios within
// [1e-4, 1e4]), an erasing probability outside [0, 1], mean/std lists whose length is neither 0, 1
// nor C, and std values that are not positive and finite. Every range is checked, also while its
// augmentation is off.
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "data/dataset.h"

namespace hpcnn::data {

// The configuration's "augmentation" section (configs/README.md), one field per JSON key with the
// same name and default (data/config.h reads and writes it).
struct Augmentation {
  int crop_padding = 0;  // P: zero padding of the random crop, pixels per side (0: no crop)
  // Random resized crop: area fraction range and aspect ratio (w/h) range; off while
  // resized_crop_scale is {1, 1} (the whole image every time).
  std::array<double, 2> resized_crop_scale{1.0, 1.0};
  std::array<double, 2> resized_crop_ratio{3.0 / 4.0, 4.0 / 3.0};
  bool horizontal_flip = false;                     // random horizontal flip
  double erasing_probability = 0;                   // random erasing: probability per sample (0: off)
  std::array<double, 2> erasing_scale{0.02, 0.33};  // erased area fraction range
  std::array<double, 2> erasing_ratio{0.3, 3.3};    // erased rectangle's aspect ratio range
  std::vector<float> mean{0.0f};                    // per channel, in the scale after /255; one value: every channel
  std::vector<float> std{1.0f};                     // per channel (> 0); one value: every channel
  // Volumes (data/augment_volume.h): log(1 + x) of the stored value before mean/std (CosmoFlow's
  // preprocessing of particle counts; also in evaluation), and the cube's symmetries in training.
  bool log1p = false;
  bool random_flips_3d = false;          // mirror each of D, H, W with probability 1/2
  bool random_axis_permutation = false;  // one of the 6 orders of (D, H, W), uniformly (cubes only)
  bool resized_crop() const { return resized_crop_scale[0] != 1.0 || resized_crop_scale[1] != 1.0; }
};

// The random choices for one sample.
struct AugmentDraw {
  int off_y = 0, off_x = 0;  // window offset into the padded image, in [0, 2P]
  bool flip = false;
  int crop_h = 0, crop_w = 0;    // random resized crop: the window [crop_y, +crop_h) x [crop_x, +crop_w)
  int crop_y = 0, crop_x = 0;    // resized to H x W (crop_h == 0: no resized crop)
  int erase_h = 0, erase_w = 0;  // random erasing: [erase_y, +erase_h) x [erase_x, +erase_w) set
  int erase_y = 0, erase_x = 0;  // to 0 after normalisation (erase_h == 0: nothing erased)
};

// Checks the options (ErrorKind::usage, see above).
void validate_augment(const Augmentation& options);

// Draws, in this order, crop offsets (when pad > 0) or the resized crop's window (when
// resized_crop()), the flip (when horizontal_flip) and the erased rectangle (when erasing_probability > 0),
// for H x W images. An option that is off consumes no random numbers.
AugmentDraw draw_augment(const Augmentation& options, std::mt19937_64& rng, int64_t height = 0, int64_t width = 0);

// Step 3: out = v(x) * scale[c] + bias[c], v(x) = log(1 + x) with log1p, else x.
class Normalizer {
 public:
  Normalizer() = default;
  Normalizer(const SampleInfo& sample, const std::vector<float>& mean, const std::vector<float>& std, bool log1p = false);
  float scale(int64_t c) const { return scale_[static_cast<size_t>(c)]; }
  float bias(int64_t c) const { return bias_[static_cast<size_t>(c)]; }
  bool log1p() const { return log1p_; }

 private:
  std::vector<float> scale_, bias_;
  bool log1p_ = false;
};

// The options against the samples they will see (ErrorKind::usage naming the key): the 2-D
// augmentations (crop_padding, resized_crop_*, horizontal_flip, erasing_*) on volumes, the 3-D
// ones on images, random_axis_permutation on a volume that is not a cube (D = H = W), and
// validate_augment's checks.
void check_augment_for(const Augmentation& options, const SampleInfo& sample);

// One image `src` (sample.bytes() bytes, u8, i16 or float by sample.type, CHW) to `dst`
// (sample.numel() floats, CHW): crop at draw.off_* with padding `pad` (or the resized crop of
// draw.crop_*), flip when draw.flip, normalise, then erase draw.erase_*. crop_padding = 0 with offsets 0,
// no resized crop, no flip and no erasing is the plain normalisation.
void transform_sample(const void* src, const SampleInfo& sample, int pad, const AugmentDraw& draw, const Normalizer& norm,
                      float* dst);

// Normalisation only (step 3), for an image or a volume: evaluation and non-augmented epochs.
void normalise_sample(const void* src, const SampleInfo& sample, const Normalizer& norm, float* dst);

// draw_augment + transform_sample when `augment`, else normalisation only (no random numbers used);
// for a volume, draw_volume_augment + transform_volume (data/augment_volume.h).
void augment_sample(const void* src, const SampleInfo& sample, const Augmentation& options, const Normalizer& norm, bool augment,
                    std::mt19937_64& rng, float* dst);

}  // namespace hpcnn::data
