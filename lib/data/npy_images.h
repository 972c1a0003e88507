// hpcnn data: .npy arrays (data/npy.h) read as images.
//
// Shapes: (N, H, W) -> channels 1; (N, C, H, W); (N, H, W, C) when the last dim is 1, 3 or 4 and
// dim 1 is not (a channels-last array, converted to NCHW per sample); volumes (N, C, D, H, W) and
// (N, D, H, W, C) by the same rule (converted to NCDHW). dtypes: |u1 -> u8 pixels, <i2 -> i16
// (particle counts), <f4 and <f8 -> fp32 pixels (<f8 rounded to nearest).
// Errors name `origin`: ErrorKind::unsupported for other ranks (e.g. flattened (N, H*W) arrays:
// reshape them to (N, H, W)) or integer dtypes other than |u1 and <i2; ErrorKind::bad_input for a zero
// image dim.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace hpcnn::data {

struct NpyImageLayout {
  int64_t count = 0;
  SampleInfo sample;           // as delivered: NC(D)HW, u8, i16 or f32
  bool channels_last = false;  // the file stores (N, H, W, C)
  std::string dtype;           // "|u1", "<i2", "<f4" or "<f8"
  size_t item_size = 1;        // bytes per element in the file
  size_t stored_sample_bytes() const { return static_cast<size_t>(sample.numel()) * item_size; }
};

NpyImageLayout npy_image_layout(const std::vector<int64_t>& shape, const std::string& dtype, const std::string& origin);

// Converts one stored sample (stored_sample_bytes() bytes at `src`) to `dst`
// (sample.bytes() bytes: u8, i16 or float, C(D)HW).
void npy_sample_to_pixels(const NpyImageLayout& layout, const uint8_t* src, void* dst);

}  // namespace hpcnn::data
