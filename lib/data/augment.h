// hpcnn data: per-sample augmentation for training (random crop with zero padding, random
// horizontal flip) and normalisation, producing the fp32 CHW values the network sees.
//
// The usual CIFAR/ImageNet recipe (e.g. torchvision RandomCrop(size, padding=P),
// RandomHorizontalFlip(), Normalize(mean, std)), in this order, for one sample of C x H x W:
//   1. crop: pad the image with P zero pixels on every side (zero in the stored pixel scale:
//      black), then take the H x W window at offset (off_y, off_x), each uniform in [0, 2P];
//      off = P is the unshifted image;
//   2. flip: with probability 1/2 mirror the columns (x -> W-1-x);
//   3. normalise: v = x / 255 for u8 pixels (x as stored for fp32 pixels), then
//      (v - mean[c]) / std[c].
// With augmentation off (evaluation, and the Final Polishing epochs of Kasagi et al., HPDC 2020,
// which train on non-augmented data) only step 3 runs.
// Random draws come from a std::mt19937_64 the caller seeds (data/loader.h seeds one per sample
// from the seed, epoch and sample index), so results are deterministic and independent of
// threads; offsets are rng() % (2P+1) and the flip is the top bit of rng(), not the
// implementation-defined std distributions, so they agree across standard libraries.
// Errors: ErrorKind::usage for a negative pad, mean/std lists whose length is neither 0, 1 nor C,
// and std values that are not positive and finite.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "data/dataset.h"

namespace hpcnn::data {

struct AugmentOptions {
  int pad = 0;              // P: zero padding of the random crop, pixels per side (0: no crop)
  bool flip = false;        // random horizontal flip
  std::vector<float> mean;  // per channel, in the scale after /255; empty: 0; one value: every channel
  std::vector<float> std;   // per channel; empty: 1; one value: every channel
};

// The random choices for one sample.
struct AugmentDraw {
  int off_y = 0, off_x = 0;  // window offset into the padded image, in [0, 2P]
  bool flip = false;
};

// Draws crop offsets (when pad > 0) and the flip (when flip), in that order. pad == 0 gives
// offsets 0 and flip == false gives no flip, without consuming random numbers for them.
AugmentDraw draw_augment(const AugmentOptions& options, std::mt19937_64& rng);

// Per-channel affine map of step 3: out = x * scale[c] + bias[c].
class Normalizer {
 public:
  Normalizer() = default;
  Normalizer(const SampleInfo& sample, const std::vector<float>& mean, const std::vector<float>& std);
  float scale(int64_t c) const { return scale_[static_cast<size_t>(c)]; }
  float bias(int64_t c) const { return bias_[static_cast<size_t>(c)]; }

 private:
  std::vector<float> scale_, bias_;
};

// One sample `src` (sample.bytes() bytes, u8 or float by sample.type, CHW) to `dst`
// (sample.numel() floats, CHW): crop at draw.off_* with padding `pad`, flip when draw.flip, then
// normalise. pad = 0 with offsets 0 and no flip is the plain normalisation.
void transform_sample(const void* src, const SampleInfo& sample, int pad, const AugmentDraw& draw, const Normalizer& norm,
                      float* dst);

// draw_augment + transform_sample when `augment`, else normalisation only (no random numbers used).
void augment_sample(const void* src, const SampleInfo& sample, const AugmentOptions& options, const Normalizer& norm,
                    bool augment, std::mt19937_64& rng, float* dst);

}  // namespace hpcnn::data
