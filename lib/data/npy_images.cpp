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
  } else if (dtype == "<f4" || dtype == "<f8") {
    l.sample.type = PixelType::f32;
    l.item_size = dtype == "<f4" ? 4 : 8;
  } else {
    throw_error(ErrorKind::unsupported, origin + ": images of dtype " + dtype + " are not supported (|u1, <f4 or <f8)");
  }
  if (shape.size() == 3) {
    l.count = shape[0];
    l.sample.channels = 1;
    l.sample.height = shape[1];
    l.sample.width = shape[2];
  } else if (shape.size() == 4) {
    l.count = shape[0];
    l.channels_last = small_channel_dim(shape[3]) && !small_channel_dim(shape[1]);
    l.sample.channels = l.channels_last ? shape[3] : shape[1];
    l.sample.height = l.channels_last ? shape[1] : shape[2];
    l.sample.width = l.channels_last ? shape[2] : shape[3];
  } else {
    throw_error(ErrorKind::unsupported, origin + ": an images array has shape (N, H, W), (N, C, H, W) or (N, H, W, C), not " +
                                            shape_to_string(shape) +
                                            (shape.size() == 2 ? " (reshape flattened images to (N, H, W))" : ""));
  }
  if (l.sample.numel() == 0)
    throw_error(ErrorKind::bad_input, origin + ": images of shape " + shape_to_string(shape) + " have no pixels");
  return l;
}

void npy_sample_to_pixels(const NpyImageLayout& l, const uint8_t* src, void* dst) {
  const int64_t C = l.sample.channels, H = l.sample.height, W = l.sample.width, HW = H * W;
  if (!l.channels_last) {
    if (l.dtype != "<f8") {
      std::memcpy(dst, src, l.stored_sample_bytes());
      return;
    }
    auto* out = static_cast<float*>(dst);
    for (int64_t i = 0; i < C * HW; ++i) {
      double v;
      std::memcpy(&v, src + 8 * i, 8);
      out[i] = static_cast<float>(v);
    }
    return;
  }
  // (H, W, C) -> (C, H, W)
  for (int64_t p = 0; p < HW; ++p) {
    for (int64_t c = 0; c < C; ++c) {
      const int64_t from = p * C + c, to = c * HW + p;
      if (l.dtype == "|u1") {
        static_cast<uint8_t*>(dst)[to] = src[from];
      } else if (l.dtype == "<f4") {
        std::memcpy(static_cast<float*>(dst) + to, src + 4 * from, 4);
      } else {
        double v;
        std::memcpy(&v, src + 8 * from, 8);
        static_cast<float*>(dst)[to] = static_cast<float>(v);
      }
    }
  }
}

}  // namespace hpcnn::data
