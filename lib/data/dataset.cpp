#include "data/dataset.h"

#include <cstring>

#include "core/error.h"
#include "data/cifar.h"
#include "data/decompress.h"
#include "data/format.h"
#include "data/idx.h"
#include "data/npy.h"
#include "data/npy_images.h"

namespace hpcnn::data {

size_t pixel_bytes(PixelType type) {
  switch (type) {
    case PixelType::u8:
      return 1;
    case PixelType::i16:
      return 2;
    case PixelType::f32:
      return 4;
  }
  return 0;
}

std::vector<int64_t> SampleInfo::dims() const {
  if (volume()) return {channels, depth, height, width};
  return {channels, height, width};
}

std::string to_string(const SampleInfo& s) {
  std::string out;
  for (int64_t d : s.dims()) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out + (s.type == PixelType::u8 ? " u8" : s.type == PixelType::i16 ? " i16" : " f32");
}

SampleInfo box_info(const SampleInfo& s, const SampleBox& box) {
  SampleInfo b = s;
  (box.axis == 0 ? b.depth : box.axis == 1 ? b.height : b.width) = box.count;
  return b;
}

void check_box(const SampleInfo& s, const SampleBox& box) {
  const int64_t n = box.axis == 0 ? s.depth : box.axis == 1 ? s.height : s.width;
  if (!s.volume() || box.axis < 0 || box.axis > 2 || box.begin < 0 || box.count < 1 || box.begin + box.count > n)
    throw_error(ErrorKind::usage, "planes [" + std::to_string(box.begin) + ", " + std::to_string(box.begin + box.count) +
                                      ") of axis " + std::to_string(box.axis) + " are not a slab of a " + to_string(s) + " sample");
}

void copy_box(const void* src, const SampleInfo& s, const SampleBox& box, void* dst) {
  check_box(s, box);
  const size_t item = pixel_bytes(s.type);
  for_each_box_run(s, box, [&](int64_t from, int64_t to, int64_t n) {
    std::memcpy(static_cast<uint8_t*>(dst) + static_cast<size_t>(to) * item,
                static_cast<const uint8_t*>(src) + static_cast<size_t>(from) * item, static_cast<size_t>(n) * item);
  });
}

const void* ImageSet::pixels() const {
  switch (sample.type) {
    case PixelType::u8:
      return pixels_u8.data();
    case PixelType::i16:
      return pixels_i16.data();
    case PixelType::f32:
      return pixels_f32.data();
  }
  return nullptr;
}

size_t ImageSet::pixel_values() const {
  return sample.type == PixelType::u8 ? pixels_u8.size() : sample.type == PixelType::i16 ? pixels_i16.size() : pixels_f32.size();
}

namespace {

DataFormat format_of(const FileBytes& fb) {
  return detect_format(fb.bytes.data(), fb.bytes.size(), fb.bytes.size(), fb.name, fb.origin);
}

ImageSet images_from_idx(FileBytes& fb) {
  const IdxHeader h = parse_idx_images_header(fb.bytes.data(), fb.bytes.size(), fb.bytes.size(), fb.origin);
  ImageSet s;
  s.count = h.dims[0];
  s.sample = {1, h.dims[1], h.dims[2], PixelType::u8};
  fb.bytes.erase(fb.bytes.begin(), fb.bytes.begin() + static_cast<ptrdiff_t>(h.data_offset));
  s.pixels_u8 = std::move(fb.bytes);
  return s;
}

ImageSet images_from_npy(FileBytes& fb) {
  NpyArray a = parse_npy(fb.bytes, fb.origin);
  fb.bytes = {};
  const NpyImageLayout l = npy_image_layout(a.shape, a.dtype, fb.origin);
  ImageSet s;
  s.count = l.count;
  s.sample = l.sample;
  if (l.sample.type == PixelType::u8 && !l.channels_last) {
    s.pixels_u8 = std::move(a.bytes);
    return s;
  }
  const size_t in_bytes = l.stored_sample_bytes(), numel = static_cast<size_t>(l.sample.numel());
  const size_t total = static_cast<size_t>(l.count) * numel;
  void* out;
  if (l.sample.type == PixelType::u8) {
    s.pixels_u8.resize(total);
    out = s.pixels_u8.data();
  } else if (l.sample.type == PixelType::i16) {
    s.pixels_i16.resize(total);
    out = s.pixels_i16.data();
  } else {
    s.pixels_f32.resize(total);
    out = s.pixels_f32.data();
  }
  for (int64_t i = 0; i < l.count; ++i)
    npy_sample_to_pixels(l, a.bytes.data() + static_cast<size_t>(i) * in_bytes,
                         static_cast<uint8_t*>(out) + static_cast<size_t>(i) * l.sample.bytes());
  return s;
}

ImageSet images_from_cifar(const FileBytes& fb) {
  ImageSet s;
  s.count = cifar_record_count(fb.bytes.size(), fb.origin);
  s.sample = {kCifarChannels, kCifarSize, kCifarSize, PixelType::u8};
  s.pixels_u8.resize(static_cast<size_t>(s.count * kCifarPixelBytes));
  s.labels.resize(static_cast<size_t>(s.count));
  s.labeled = true;
  for (int64_t i = 0; i < s.count; ++i) {
    const uint8_t* rec = fb.bytes.data() + i * kCifarRecordBytes;
    s.labels[static_cast<size_t>(i)] = cifar_label(rec[0], i, fb.origin);
    std::memcpy(s.pixels_u8.data() + i * kCifarPixelBytes, rec + 1, kCifarPixelBytes);
  }
  return s;
}

}  // namespace

namespace {

// The class labels of a decoded labels file (IDX 0x00000801 or a 1-D integer .npy).
std::vector<int32_t> labels_of(const FileBytes& fb, const std::string& labels_path) {
  switch (format_of(fb)) {
    case DataFormat::idx: {
      const IdxHeader h = parse_idx_labels_header(fb.bytes.data(), fb.bytes.size(), fb.bytes.size(), fb.origin);
      return std::vector<int32_t>(fb.bytes.begin() + static_cast<ptrdiff_t>(h.data_offset), fb.bytes.end());
    }
    case DataFormat::npy:
      return npy_to_labels(parse_npy(fb.bytes, fb.origin));
    case DataFormat::cifar10:
      throw_error(ErrorKind::usage, labels_path +
                                        ": a CIFAR-10 binary file holds images and labels together; "
                                        "give it as the images file and no labels file");
  }
  return {};
}

}  // namespace

std::vector<int32_t> load_labels(const std::string& labels_path, int decode_threads) {
  return labels_of(read_file_decoded(labels_path, decode_threads), labels_path);
}

Annotations load_annotations(const std::string& path, int decode_threads) {
  FileBytes fb = read_file_decoded(path, decode_threads);  // read and decoded once, whatever it holds
  if (format_of(fb) == DataFormat::npy) {  // parsed once: float arrays are targets, integer ones labels
    const NpyArray a = parse_npy(fb.bytes, fb.origin);
    if (a.dtype == "<f4" || a.dtype == "<f8") {
      Targets t = npy_to_targets(a);
      return {{}, std::move(t.values), t.width};
    }
    return {npy_to_labels(a), {}, 0};
  }
  return {labels_of(fb, path), {}, 0};
}

Annotations load_annotations(const std::string& path, const std::string& images_path, int64_t count, int decode_threads) {
  Annotations a = load_annotations(path, decode_threads);
  if (a.count() != count)
    throw_error(ErrorKind::bad_input, path + " holds " + std::to_string(a.count()) + (a.width > 0 ? " target rows" : " labels") +
                                          " but " + images_path + " holds " + std::to_string(count) + " images");
  return a;
}

ImageSet load_images(const std::string& images_path, const std::string& labels_path, int decode_threads) {
  ImageSet s;
  {
    FileBytes fb = read_file_decoded(images_path, decode_threads);
    const DataFormat f = format_of(fb);
    if (f == DataFormat::cifar10 && !labels_path.empty())
      throw_error(
          ErrorKind::usage,
          images_path + " is a CIFAR-10 binary file, which holds its labels; give no labels file (got " + labels_path + ")");
    s = f == DataFormat::idx ? images_from_idx(fb) : f == DataFormat::npy ? images_from_npy(fb) : images_from_cifar(fb);
  }
  s.origin = images_path;
  if (!labels_path.empty()) {
    Annotations a = load_annotations(labels_path, images_path, s.count, decode_threads);
    s.labeled = a.width == 0;
    s.labels = std::move(a.labels);
    s.targets = std::move(a.targets);
    s.target_width = a.width;
  }
  return s;
}

ImageSet load_images(const std::vector<std::string>& images_paths, const std::vector<std::string>& labels_paths,
                     int decode_threads) {
  if (images_paths.empty()) throw_error(ErrorKind::usage, "no images files given");
  if (!labels_paths.empty() && labels_paths.size() != images_paths.size())
    throw_error(ErrorKind::usage, std::to_string(images_paths.size()) + " images files but " +
                                      std::to_string(labels_paths.size()) + " labels files (give one per images file, or none)");
  auto labels_of = [&](size_t i) { return labels_paths.empty() ? std::string() : labels_paths[i]; };
  ImageSet all = load_images(images_paths[0], labels_of(0), decode_threads);
  for (size_t i = 1; i < images_paths.size(); ++i) {
    ImageSet part = load_images(images_paths[i], labels_of(i), decode_threads);
    if (!(part.sample == all.sample))
      throw_error(ErrorKind::bad_input, images_paths[i] + " holds " + to_string(part.sample) + " images, " + images_paths[0] +
                                            " holds " + to_string(all.sample));
    if (part.has_labels() != all.has_labels())
      throw_error(ErrorKind::bad_input, images_paths[i] + (part.has_labels() ? " has" : " has no") + " labels, " +
                                            images_paths[0] + (all.has_labels() ? " has" : " has no"));
    if (part.target_width != all.target_width)
      throw_error(ErrorKind::bad_input, images_paths[i] + " has " + std::to_string(part.target_width) + " targets per sample, " +
                                            images_paths[0] + " has " + std::to_string(all.target_width));
    all.count += part.count;
    all.pixels_u8.insert(all.pixels_u8.end(), part.pixels_u8.begin(), part.pixels_u8.end());
    all.pixels_i16.insert(all.pixels_i16.end(), part.pixels_i16.begin(), part.pixels_i16.end());
    all.targets.insert(all.targets.end(), part.targets.begin(), part.targets.end());
    all.pixels_f32.insert(all.pixels_f32.end(), part.pixels_f32.begin(), part.pixels_f32.end());
    all.labels.insert(all.labels.end(), part.labels.begin(), part.labels.end());
    all.origin += ", " + images_paths[i];
  }
  return all;
}

}  // namespace hpcnn::data
