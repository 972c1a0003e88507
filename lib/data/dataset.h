// hpcnn data: image and volume data sets in memory, and loading them from IDX, CIFAR-10 binary,
// NumPy .npy files, also when gzipped or encoded by huffgpu-encode (decoded in memory when loaded).
//
// Formats are recognised by content (a file's name only for CIFAR-10, which has no header):
//   gzip (1f 8b) / huffgpu ("HUFG"): undone in memory first (data/decompress.h), then the
//       decoded bytes are recognised again; "x.idx.gz.huf" and "x.bin.huf" both work.
//   IDX (big-endian magic 00 00 08 nd; yann.lecun.com/exdb/mnist): images 0x00000803
//       (N, rows, cols) of unsigned bytes -> channels 1; labels 0x00000801 (N) of unsigned bytes.
//       Other IDX element types are ErrorKind::unsupported.
//   NumPy .npy (magic "\x93NUMPY", data/npy.h): images of dtype |u1 (-> u8 pixels), <i2 (-> i16)
//       or <f4/<f8 (-> fp32 pixels) with shape (N, H, W) (channels 1), (N, C, H, W), or
//       (N, H, W, C) when the last dim is 1, 3 or 4 and dim 1 is not (converted to NCHW); volumes
//       of shape (N, C, D, H, W) or (N, D, H, W, C) (the same rule; converted to NCDHW); labels a
//       1-D integer array, or regression targets a float array (N, K) or (N,).
//   CIFAR-10 binary (www.cs.toronto.edu/~kriz/cifar.html): a name ending in ".bin" (after removing
//       .gz/.huf suffixes of decoded layers) and records of 3073 bytes: label byte (0..9), then
//       3x32x32 pixels in CHW order. Images and labels come from the same file, so labels_path
//       must be empty. (CIFAR-100's 3074-byte records are not supported.)
//
// Pixel values: u8 as stored (0..255); i16 and fp32 as stored (they skip the /255 of data/augment.h).
// Errors name the file (as given, plus " (after gzip)"/" (after huffgpu)" when the offset is
// into decoded bytes) and the byte offset:
//   ErrorKind::io          a file cannot be opened or read;
//   ErrorKind::bad_input   empty, truncated, corrupt or unrecognised files, size or count
//                          mismatches between images and labels (or targets), CIFAR labels over 9,
//                          NaN or infinite targets;
//   ErrorKind::unsupported recognised but unsupported variants (IDX element types other than
//                          unsigned byte, NPY dtypes or ranks that are not images, ...);
//   ErrorKind::usage       a labels file given with CIFAR-10, or mismatched path lists.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpcnn::data {

enum class PixelType : uint8_t { u8, i16, f32 };

size_t pixel_bytes(PixelType type);  // 1, 2 or 4

// The shape and element type of one sample: an image C x H x W (spatial 2) or a volume
// C x D x H x W (spatial 3; the 3-D CNNs' NCDHW samples, e.g. CosmoFlow's 4 x 128^3 int16 counts).
struct SampleInfo {
  int64_t channels = 0, height = 0, width = 0;
  PixelType type = PixelType::u8;
  int64_t depth = 1;  // D of a volume; 1 for an image
  int spatial = 2;    // spatial axes: 2 (C, H, W) or 3 (C, D, H, W)

  bool volume() const { return spatial == 3; }
  int64_t numel() const { return channels * depth * height * width; }
  size_t bytes() const { return static_cast<size_t>(numel()) * pixel_bytes(type); }
  std::vector<int64_t> dims() const;  // {C, H, W} or {C, D, H, W}
  bool operator==(const SampleInfo&) const = default;
};

std::string to_string(const SampleInfo& info);  // "1x28x28 u8", "4x32x32x32 i16"

// A slab of a volume sample: planes [begin, begin + count) along spatial axis `axis` (0 = D,
// 1 = H, 2 = W), every channel and the whole of the other two axes; stored C x D' x H' x W' with
// the axis shortened to `count` (the spatial split's share of a sample: data/augment_volume.h).
struct SampleBox {
  int axis = 0;
  int64_t begin = 0, count = 0;
};
// The sample's dimensions with box.axis shortened to box.count.
SampleInfo box_info(const SampleInfo& sample, const SampleBox& box);
// The contiguous runs of `box` in a stored sample, in storage order: fn(from, to, n) for each run of
// n values at value offset `from` in the whole sample and `to` in the box (C x prod(axes before
// box.axis) runs of count x prod(axes after) values).
template <class Fn>
void for_each_box_run(const SampleInfo& sample, const SampleBox& box, Fn&& fn) {
  const int64_t n[3] = {sample.depth, sample.height, sample.width};
  int64_t outer = sample.channels, inner = 1;
  for (int a = 0; a < box.axis; ++a) outer *= n[a];
  for (int a = box.axis + 1; a < 3; ++a) inner *= n[a];
  const int64_t run = box.count * inner;
  for (int64_t o = 0; o < outer; ++o) fn(o * n[box.axis] * inner + box.begin * inner, o * run, run);
}
// ErrorKind::usage (naming the planes and the sample) unless `box` lies inside a volume sample.
void check_box(const SampleInfo& sample, const SampleBox& box);
// Copies `box` of one whole sample `src` (sample.bytes() bytes, CDHW) to `dst` (box_info bytes).
// ErrorKind::usage for an image sample or a box outside the volume.
void copy_box(const void* src, const SampleInfo& sample, const SampleBox& box, void* dst);

// Images (or volumes) in memory, C(D)HW per sample, samples one after another, with class labels or
// regression targets (a sample set has one or the other, or neither).
struct ImageSet {
  int64_t count = 0;
  SampleInfo sample;
  std::vector<uint8_t> pixels_u8;  // count * sample.numel() values when sample.type == u8, else empty
  std::vector<int16_t> pixels_i16;  // count * sample.numel() values when sample.type == i16, else empty
  std::vector<float> pixels_f32;   // count * sample.numel() values when sample.type == f32, else empty
  std::vector<int32_t> labels;     // count class labels when labeled, else empty
  bool labeled = false;            // labels were given (or come with the images: CIFAR-10)
  std::vector<float> targets;      // count * target_width regression targets, else empty
  int64_t target_width = 0;        // K targets per sample (0: none)
  std::string origin;              // the images file(s), for messages

  bool has_labels() const { return labeled; }
  const void* pixels() const;  // the vector of sample.type
  size_t pixel_values() const;  // its size
};

// What a "labels" file holds: class labels (IDX 0x00000801, or a 1-D integer .npy) or regression
// targets (a float .npy of shape (N, K) or (N,): data/npy.h, npy_to_targets).
struct Annotations {
  std::vector<int32_t> labels;
  std::vector<float> targets;  // N * width
  int64_t width = 0;           // 0: class labels
  int64_t count() const { return width > 0 ? static_cast<int64_t>(targets.size()) / width : static_cast<int64_t>(labels.size()); }
};

// A labels file, by content: a float .npy gives targets, anything else class labels (load_labels).
Annotations load_annotations(const std::string& path, int decode_threads = 0);
// The same, checked to hold `count` rows (ErrorKind::bad_input naming both files otherwise).
Annotations load_annotations(const std::string& path, const std::string& images_path, int64_t count, int decode_threads = 0);

// Loads an images file and its labels file (labels_path empty: no labels, or CIFAR-10, whose
// files hold both; a float .npy: regression targets). Checks that the label (target row) count
// equals the image count.
ImageSet load_images(const std::string& images_path, const std::string& labels_path, int decode_threads = 0);

// Several files in order, concatenated (CIFAR-10's data_batch_1..5.bin, or shards). labels_paths
// is empty (no labels, or CIFAR-10) or has one entry per images path. All parts must have the
// same sample shape and type (ErrorKind::bad_input naming the first that differs).
ImageSet load_images(const std::vector<std::string>& images_paths, const std::vector<std::string>& labels_paths,
                     int decode_threads = 0);

// A labels file alone: IDX 0x00000801 or a 1-D integer .npy (compressed or not).
std::vector<int32_t> load_labels(const std::string& labels_path, int decode_threads = 0);

}  // namespace hpcnn::data
