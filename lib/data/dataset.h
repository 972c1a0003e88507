// hpcnn data: image data sets in memory, and loading them from IDX, CIFAR-10 binary, NumPy .npy
// files, also when gzipped or encoded by huffgpu-encode (decoded in memory when loaded).
//
// Formats are recognised by content (a file's name only for CIFAR-10, which has no header):
//   gzip (1f 8b) / huffgpu ("HUFG"): undone in memory first (data/decompress.h), then the
//       decoded bytes are recognised again; "x.idx.gz.huf" and "x.bin.huf" both work.
//   IDX (big-endian magic 00 00 08 nd; yann.lecun.com/exdb/mnist): images 0x00000803
//       (N, rows, cols) of unsigned bytes -> channels 1; labels 0x00000801 (N) of unsigned bytes.
//       Other IDX element types are ErrorKind::unsupported.
//   NumPy .npy (magic "\x93NUMPY", data/npy.h): images of dtype |u1 (-> u8 pixels) or <f4/<f8
//       (-> fp32 pixels) with shape (N, H, W) (channels 1), (N, C, H, W), or (N, H, W, C) when the
//       last dim is 1, 3 or 4 and dim 1 is not (converted to NCHW); labels a 1-D integer array.
//   CIFAR-10 binary (www.cs.toronto.edu/~kriz/cifar.html): a name ending in ".bin" (after removing
//       .gz/.huf suffixes of decoded layers) and records of 3073 bytes: label byte (0..9), then
//       3x32x32 pixels in CHW order. Images and labels come from the same file, so labels_path
//       must be empty. (CIFAR-100's 3074-byte records are not supported.)
//
// Pixel values: u8 as stored (0..255); fp32 as stored (they skip the /255 of data/augment.h).
// Errors name the file (as given, plus " (after gzip)"/" (after huffgpu)" when the offset is
// into decoded bytes) and the byte offset:
//   ErrorKind::io          a file cannot be opened or read;
//   ErrorKind::bad_input   empty, truncated, corrupt or unrecognised files, size or count
//                          mismatches between images and labels, CIFAR labels over 9;
//   ErrorKind::unsupported recognised but unsupported variants (IDX element types other than
//                          unsigned byte, NPY dtypes or ranks that are not images, ...);
//   ErrorKind::usage       a labels file given with CIFAR-10, or mismatched path lists.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpcnn::data {

enum class PixelType : uint8_t { u8, f32 };

// The shape and element type of one sample (one image).
struct SampleInfo {
  int64_t channels = 0, height = 0, width = 0;
  PixelType type = PixelType::u8;

  int64_t numel() const { return channels * height * width; }
  size_t bytes() const { return static_cast<size_t>(numel()) * (type == PixelType::u8 ? 1 : sizeof(float)); }
  bool operator==(const SampleInfo&) const = default;
};

std::string to_string(const SampleInfo& info);  // "1x28x28 u8"

// Images in memory, NCHW per sample, samples one after another.
struct ImageSet {
  int64_t count = 0;
  SampleInfo sample;
  std::vector<uint8_t> pixels_u8;  // count * sample.numel() values when sample.type == u8, else empty
  std::vector<float> pixels_f32;   // count * sample.numel() values when sample.type == f32, else empty
  std::vector<int32_t> labels;     // count class labels when labeled, else empty
  bool labeled = false;            // labels were given (or come with the images: CIFAR-10)
  std::string origin;              // the images file(s), for messages

  bool has_labels() const { return labeled; }
};

// Loads an images file and its labels file (labels_path empty: no labels, or CIFAR-10, whose
// files hold both). Checks that the label count equals the image count.
ImageSet load_images(const std::string& images_path, const std::string& labels_path, int decode_threads = 0);

// Several files in order, concatenated (CIFAR-10's data_batch_1..5.bin, or shards). labels_paths
// is empty (no labels, or CIFAR-10) or has one entry per images path. All parts must have the
// same sample shape and type (ErrorKind::bad_input naming the first that differs).
ImageSet load_images(const std::vector<std::string>& images_paths, const std::vector<std::string>& labels_paths,
                     int decode_threads = 0);

// A labels file alone: IDX 0x00000801 or a 1-D integer .npy (compressed or not).
std::vector<int32_t> load_labels(const std::string& labels_path, int decode_threads = 0);

}  // namespace hpcnn::data
