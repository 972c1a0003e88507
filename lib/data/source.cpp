#include "data/source.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "data/cifar.h"
#include "data/decompress.h"
#include "data/file_io.h"
#include "data/format.h"
#include "data/idx.h"
#include "data/npy.h"
#include "data/npy_images.h"

namespace hpcnn::data {

void SampleSource::check_index(int64_t index) const {
  if (index < 0 || index >= size_)
    throw_error(ErrorKind::usage,
                origin_ + ": sample index " + std::to_string(index) + " out of range [0, " + std::to_string(size_) + ")");
}

std::string SampleSource::locate(int64_t index) const { return "sample " + std::to_string(index) + " of " + origin_; }

void SampleSource::read_targets(int64_t index, float* targets) const {
  check_index(index);
  if (target_width_ == 0) throw_error(ErrorKind::usage, origin_ + " has no regression targets");
  std::copy_n(targets_.data() + index * target_width_, target_width_, targets);
}

void SampleSource::read_box(int64_t index, const SampleBox& box, void* pixels, int32_t* label) const {
  check_box(sample_, box);
  thread_local std::vector<uint8_t> whole;
  whole.resize(sample_.bytes());
  read(index, whole.data(), label);
  copy_box(whole.data(), sample_, box, pixels);
}

// ---- InMemorySource -------------------------------------------------------------------------

InMemorySource::InMemorySource(ImageSet images) : set_(std::move(images)) {
  size_ = set_.count;
  sample_ = set_.sample;
  labeled_ = set_.has_labels();
  origin_ = set_.origin;
  target_width_ = set_.target_width;
  targets_ = std::move(set_.targets);
  const size_t want = static_cast<size_t>(set_.count) * static_cast<size_t>(sample_.numel());
  const size_t have = set_.pixel_values();
  if (have != want || (labeled_ && set_.labels.size() != static_cast<size_t>(set_.count)) ||
      targets_.size() != static_cast<size_t>(set_.count * target_width_))
    throw_error(ErrorKind::usage, origin_ + ": inconsistent ImageSet (" + std::to_string(have) + " pixel values for " +
                                      std::to_string(set_.count) + " samples of " + to_string(sample_) + ")");
}

void InMemorySource::read(int64_t index, void* pixels, int32_t* label) const {
  check_index(index);
  const size_t n = sample_.bytes();
  std::memcpy(pixels, static_cast<const uint8_t*>(set_.pixels()) + static_cast<size_t>(index) * n, n);
  if (label) *label = labeled_ ? set_.labels[static_cast<size_t>(index)] : -1;
}

void InMemorySource::read_box(int64_t index, const SampleBox& box, void* pixels, int32_t* label) const {
  check_index(index);
  copy_box(static_cast<const uint8_t*>(set_.pixels()) + static_cast<size_t>(index) * sample_.bytes(), sample_, box, pixels);
  if (label) *label = labeled_ ? set_.labels[static_cast<size_t>(index)] : -1;
}

// ---- FileSource -----------------------------------------------------------------------------

struct FileSource::Impl {
  explicit Impl(File f) : file(std::move(f)) {}
  File file;
  DataFormat format = DataFormat::idx;
  uint64_t data_offset = 0;     // first sample
  uint64_t stride = 0;          // bytes per stored sample (CIFAR-10: per record)
  NpyImageLayout npy;           // NPY only
  bool convert = false;         // NPY: stored bytes need conversion (f8, channels last)
  std::vector<int32_t> labels;  // IDX/NPY with a labels file
  mutable std::atomic<int64_t> bytes_read{0};

  void pread(void* dst, uint64_t n, uint64_t at) const {
    file.pread_exact(dst, n, at);
    bytes_read += static_cast<int64_t>(n);
  }
};

FileSource::FileSource(const std::string& images_path, const std::string& labels_path)
    : impl_(std::make_unique<Impl>(File::open(images_path))) {
  Impl& m = *impl_;
  origin_ = images_path;
  uint8_t head[kIdxMaxHeaderBytes] = {};
  const size_t n = m.file.pread_some(head, sizeof head, 0);
  if (const Compression c = detect_compression(head, n); c != Compression::none)
    throw_error(ErrorKind::usage,
                images_path + " is " + compression_name(c) +
                    "-compressed; compressed files are decoded into memory (load_images), not read sample by sample");
  m.format = detect_format(head, n, m.file.size(), images_path, images_path);
  switch (m.format) {
    case DataFormat::idx: {
      const IdxHeader h = parse_idx_images_header(head, n, m.file.size(), images_path);
      size_ = h.dims[0];
      sample_ = {1, h.dims[1], h.dims[2], PixelType::u8};
      m.data_offset = h.data_offset;
      m.stride = static_cast<uint64_t>(sample_.numel());
      break;
    }
    case DataFormat::npy: {
      uint64_t offset = 0;
      const NpyArray a = read_npy_header(images_path, &offset);
      m.npy = npy_image_layout(a.shape, a.dtype, images_path);
      size_ = m.npy.count;
      sample_ = m.npy.sample;
      m.data_offset = offset;
      m.stride = m.npy.stored_sample_bytes();
      m.convert = m.npy.channels_last || m.npy.dtype == "<f8";
      break;
    }
    case DataFormat::cifar10:
      if (!labels_path.empty())
        throw_error(
            ErrorKind::usage,
            images_path + " is a CIFAR-10 binary file, which holds its labels; give no labels file (got " + labels_path + ")");
      size_ = cifar_record_count(m.file.size(), images_path);
      sample_ = {kCifarChannels, kCifarSize, kCifarSize, PixelType::u8};
      m.data_offset = 0;
      m.stride = kCifarRecordBytes;
      labeled_ = true;
      break;
  }
  if (!labels_path.empty()) {
    Annotations a = load_annotations(labels_path, images_path, size_);
    if (a.width > 0) {
      target_width_ = a.width;
      targets_ = std::move(a.targets);
    } else {
      m.labels = std::move(a.labels);
      labeled_ = true;
    }
  }
}

FileSource::~FileSource() = default;

void FileSource::read(int64_t index, void* pixels, int32_t* label) const {
  check_index(index);
  const Impl& m = *impl_;
  const uint64_t at = m.data_offset + static_cast<uint64_t>(index) * m.stride;
  switch (m.format) {
    case DataFormat::idx:
      m.pread(pixels, m.stride, at);
      break;
    case DataFormat::npy:
      if (!m.convert) {
        m.pread(pixels, m.stride, at);
      } else {
        thread_local std::vector<uint8_t> buf;
        buf.resize(m.stride);
        m.pread(buf.data(), m.stride, at);
        npy_sample_to_pixels(m.npy, buf.data(), pixels);
      }
      break;
    case DataFormat::cifar10: {
      std::array<uint8_t, kCifarRecordBytes> rec;
      m.pread(rec.data(), rec.size(), at);
      const int32_t l = cifar_label(rec[0], index, origin_);
      std::memcpy(pixels, rec.data() + 1, kCifarPixelBytes);
      if (label) *label = l;
      return;
    }
  }
  if (label) *label = labeled_ ? m.labels[static_cast<size_t>(index)] : -1;
}

// A channels-first .npy of the stored dtype holds the slab as runs of the file (data/dataset.h:
// for_each_box_run): read those alone. Converted samples (channels last, f8) are read whole.
void FileSource::read_box(int64_t index, const SampleBox& box, void* pixels, int32_t* label) const {
  const Impl& m = *impl_;
  if (m.format != DataFormat::npy || m.convert) return SampleSource::read_box(index, box, pixels, label);
  check_index(index);
  check_box(sample_, box);
  const uint64_t at = m.data_offset + static_cast<uint64_t>(index) * m.stride;
  const uint64_t item = pixel_bytes(sample_.type);
  for_each_box_run(sample_, box, [&](int64_t from, int64_t to, int64_t n) {
    m.pread(static_cast<uint8_t*>(pixels) + static_cast<uint64_t>(to) * item, static_cast<uint64_t>(n) * item,
            at + static_cast<uint64_t>(from) * item);
  });
  if (label) *label = labeled_ ? m.labels[static_cast<size_t>(index)] : -1;
}

int64_t FileSource::bytes_read() const { return impl_->bytes_read.load(); }

// ---- ConcatSource ---------------------------------------------------------------------------

ConcatSource::ConcatSource(std::vector<std::shared_ptr<const SampleSource>> parts) : parts_(std::move(parts)) {
  if (parts_.empty()) throw_error(ErrorKind::usage, "ConcatSource: no parts");
  sample_ = parts_[0]->sample();
  labeled_ = parts_[0]->has_labels();
  target_width_ = parts_[0]->target_width();
  for (const auto& p : parts_) {
    if (p->target_width() != target_width_)
      throw_error(ErrorKind::bad_input, p->origin() + " has " + std::to_string(p->target_width()) + " targets per sample, " +
                                            parts_[0]->origin() + " has " + std::to_string(target_width_));
    if (!(p->sample() == sample_))
      throw_error(ErrorKind::bad_input, p->origin() + " holds " + to_string(p->sample()) + " images, " + parts_[0]->origin() +
                                            " holds " + to_string(sample_));
    if (p->has_labels() != labeled_)
      throw_error(ErrorKind::bad_input, p->origin() + (p->has_labels() ? " has" : " has no") + " labels, " + parts_[0]->origin() +
                                            (labeled_ ? " has" : " has no"));
    starts_.push_back(size_);
    size_ += p->size();
    origin_ += (origin_.empty() ? "" : ", ") + p->origin();
  }
}

std::string ConcatSource::locate(int64_t index) const {
  if (index < 0 || index >= size_) return SampleSource::locate(index);
  const size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin()) - 1;
  return parts_[k]->locate(index - starts_[k]);
}

bool ConcatSource::in_memory() const {
  return std::all_of(parts_.begin(), parts_.end(), [](const auto& p) { return p->in_memory(); });
}

size_t ConcatSource::part(int64_t index) const {
  check_index(index);
  return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin()) - 1;
}

void ConcatSource::read(int64_t index, void* pixels, int32_t* label) const {
  const size_t k = part(index);
  parts_[k]->read(index - starts_[k], pixels, label);
}

void ConcatSource::read_box(int64_t index, const SampleBox& box, void* pixels, int32_t* label) const {
  const size_t k = part(index);
  parts_[k]->read_box(index - starts_[k], box, pixels, label);
}

int64_t ConcatSource::bytes_read() const {
  int64_t n = 0;
  for (const auto& p : parts_) n += p->bytes_read();
  return n;
}

void ConcatSource::read_targets(int64_t index, float* targets) const {
  const size_t k = part(index);
  parts_[k]->read_targets(index - starts_[k], targets);
}

// ---- open_source ----------------------------------------------------------------------------

std::shared_ptr<const SampleSource> open_source(const DataFiles& files) {
  if (files.images.empty()) throw_error(ErrorKind::usage, "no images files given");
  if (!files.labels.empty() && files.labels.size() != files.images.size())
    throw_error(ErrorKind::usage, std::to_string(files.images.size()) + " images files but " +
                                      std::to_string(files.labels.size()) + " labels files (give one per images file, or none)");
  if (files.cache) return std::make_shared<InMemorySource>(load_images(files.images, files.labels, files.decode_threads));
  std::vector<std::shared_ptr<const SampleSource>> parts;
  for (size_t i = 0; i < files.images.size(); ++i) {
    const std::string& path = files.images[i];
    const std::string labels = files.labels.empty() ? std::string() : files.labels[i];
    uint8_t head[8] = {};
    const size_t n = File::open(path).pread_some(head, sizeof head, 0);
    if (const Compression c = detect_compression(head, n); c != Compression::none) {
      spdlog::info("{} is {}-compressed: decoding it into memory (no sample-by-sample reads of compressed files)", path,
                   compression_name(c));
      parts.push_back(std::make_shared<InMemorySource>(load_images(path, labels, files.decode_threads)));
    } else {
      parts.push_back(std::make_shared<FileSource>(path, labels));
    }
  }
  if (parts.size() == 1) return parts[0];
  return std::make_shared<ConcatSource>(std::move(parts));
}

}  // namespace hpcnn::data

namespace hpcnn::data {

RangeSource::RangeSource(std::shared_ptr<const SampleSource> parent, int64_t begin, int64_t count)
    : parent_(std::move(parent)), begin_(begin) {
  if (begin < 0 || count < 0 || begin + count > parent_->size())
    throw_error(ErrorKind::usage, "samples [" + std::to_string(begin) + ", " + std::to_string(begin + count) + ") of " +
                                      parent_->origin() + ", which has " + std::to_string(parent_->size()));
  size_ = count;
  sample_ = parent_->sample();
  labeled_ = parent_->has_labels();
  target_width_ = parent_->target_width();
  origin_ = parent_->origin() + " [" + std::to_string(begin) + ", " + std::to_string(begin + count) + ")";
}

std::pair<std::shared_ptr<const SampleSource>, std::shared_ptr<const SampleSource>> split_validation(
    const std::shared_ptr<const SampleSource>& all, int64_t validation) {
  if (validation >= all->size())
    throw_error(ErrorKind::usage, "data.validation_samples " + std::to_string(validation) + " leaves no training samples of " +
                                      all->origin() + " (" + std::to_string(all->size()) + ")");
  const int64_t train = all->size() - validation;
  return {std::make_shared<RangeSource>(all, 0, train), std::make_shared<RangeSource>(all, train, validation)};
}

void RangeSource::read(int64_t index, void* pixels, int32_t* label) const {
  check_index(index);
  parent_->read(begin_ + index, pixels, label);
}

void RangeSource::read_box(int64_t index, const SampleBox& box, void* pixels, int32_t* label) const {
  check_index(index);
  parent_->read_box(begin_ + index, box, pixels, label);
}

void RangeSource::read_targets(int64_t index, float* targets) const {
  check_index(index);
  parent_->read_targets(begin_ + index, targets);
}

}  // namespace hpcnn::data
