#include "data/npy_images.h"

#include <cstring>

#include "core/error.h"
#include "tensor/tensor.h"

namespace hpcnn::data {

namespace {
bool small_channel_dim(int64_t d) { return d == 1 || d == 3 || d == 4; }
}  // namespace

NpyImageLayout npy_image_layout(const std::vector<int64_t>& shape, const std::string& dtype, const std::string& origin) {
  NpyImageLayout l;
  l.dtype = dtype;
  if (dtype == "|u1") {
    l.sample.type = PixelType::u8;
    l.item_size = 1;
  } else if (dtype == "<i2") {
    l.sample.type = PixelType::i16;
    l.item_size = 2;
  } else if (dtype == "<f4" || dtype == "<f8") {
    l.sample.type = PixelType::f32;
    l.item_size = dtype == "<f4" ? 4 : 8;
  } else {
    throw_error(ErrorKind::unsupported,
                origin + ": images of dtype " + dtype + " are not supported (|u1, <i2, <f4 or <f8)" +
                    (dtype == "<i4" || dtype == "<i8" ? " (counts that fit int16: numpy's astype('<i2'))" : ""));
  }
  const size_t r = shape.size();
  if (r == 3) {
    l.count = shape[0];
    l.sample.channels = 1;
    l.sample.height = shape[1];
    l.sample.width = shape[2];
  } else if (r == 4 || r == 5) {
    l.count = shape[0];
    l.channels_last = small_channel_dim(shape[r - 1]) && !small_channel_dim(shape[1]);
    // The spatial dims in order, after the batch and without the channel axis.
    const size_t first = l.channels_last ? 1 : 2;
    l.sample.channels = l.channels_last ? shape[r - 1] : shape[1];
    if (r == 5) {
      l.sample.spatial = 3;
      l.sample.depth = shape[first];
    }
    l.sample.height = shape[first + r - 4];
    l.sample.width = shape[first + r - 3];
  } else {
    throw_error(ErrorKind::unsupported,
                origin + ": an images array has shape (N, H, W), (N, C, H, W) or (N, H, W, C), a volumes array (N, C, D, H, W) "
                         "or (N, D, H, W, C), not " +
                    shape_to_string(shape) + (r == 2 ? " (reshape flattened images to (N, H, W))" : ""));
  }
  if (l.sample.numel() == 0)
    throw_error(ErrorKind::bad_input, origin + ": images of shape " + shape_to_string(shape) + " have no pixels");
  return l;
}

namespace {

// Element `from` of the stored sample, converted to the delivered type, written as element `to`.
void convert_one(const NpyImageLayout& l, const uint8_t* src, int64_t from, void* dst, int64_t to) {
  if (l.dtype == "|u1") {
    static_cast<uint8_t*>(dst)[to] = src[from];
  } else if (l.dtype == "<i2") {
    std::memcpy(static_cast<int16_t*>(dst) + to, src + 2 * from, 2);
  } else if (l.dtype == "<f4") {
    std::memcpy(static_cast<float*>(dst) + to, src + 4 * from, 4);
  } else {
    double v;
    std::memcpy(&v, src + 8 * from, 8);
    static_cast<float*>(dst)[to] = static_cast<float>(v);
  }
}

}  // namespace

void npy_sample_to_pixels(const NpyImageLayout& l, const uint8_t* src, void* dst) {
  const int64_t C = l.sample.channels, P = l.sample.numel() / C;  // P: pixels (voxels) per channel
  if (!l.channels_last) {
    if (l.dtype != "<f8") {
      std::memcpy(dst, src, l.stored_sample_bytes());
      return;
    }
    for (int64_t i = 0; i < C * P; ++i) convert_one(l, src, i, dst, i);
    return;
  }
  // ([D,] H, W, C) -> (C, [D,] H, W)
  for (int64_t p = 0; p < P; ++p)
    for (int64_t c = 0; c < C; ++c) convert_one(l, src, p * C + c, dst, c * P + p);
}

}  // namespace hpcnn::data
