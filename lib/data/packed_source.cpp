#include "data/packed_source.h"

#include <cstring>

#include "core/error.h"

namespace hpcnn::data {

namespace {
uint64_t align8(uint64_t n) { return (n + 7) / 8 * 8; }
}  // namespace

uint64_t PackedLayout::pixel_bytes() const { return static_cast<uint64_t>(count) * sample.bytes(); }
uint64_t PackedLayout::labels_offset() const { return align8(pixel_bytes()); }
uint64_t PackedLayout::targets_offset() const {
  return align8(labels_offset() + (labeled ? static_cast<uint64_t>(count) * sizeof(int32_t) : 0));
}
uint64_t PackedLayout::bytes() const {
  return targets_offset() + static_cast<uint64_t>(count) * static_cast<uint64_t>(target_width) * sizeof(float);
}

PackedLayout packed_layout(const ImageSet& set) {
  PackedLayout l;
  l.count = set.count;
  l.sample = set.sample;
  l.target_width = set.target_width;
  l.labeled = set.has_labels() ? 1 : 0;
  return l;
}

void pack_images(const ImageSet& set, const PackedLayout& layout, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  if (set.pixel_values() * pixel_bytes(set.sample.type) != layout.pixel_bytes() ||
      (layout.labeled && set.labels.size() != static_cast<size_t>(layout.count)) ||
      set.targets.size() != static_cast<size_t>(layout.count * layout.target_width))
    throw_error(ErrorKind::usage, set.origin + ": the ImageSet does not match its packed layout");
  if (layout.pixel_bytes() > 0) std::memcpy(out, set.pixels(), layout.pixel_bytes());
  if (layout.labeled && layout.count > 0)
    std::memcpy(out + layout.labels_offset(), set.labels.data(), set.labels.size() * sizeof(int32_t));
  if (!set.targets.empty()) std::memcpy(out + layout.targets_offset(), set.targets.data(), set.targets.size() * sizeof(float));
}

PackedSource::PackedSource(const PackedLayout& layout, const void* base, std::shared_ptr<const void> keeper, std::string origin)
    : layout_(layout), base_(static_cast<const uint8_t*>(base)), keeper_(std::move(keeper)) {
  origin_ = std::move(origin);
  if (layout.count < 0 || layout.target_width < 0 || (base == nullptr && layout.bytes() > 0))
    throw_error(ErrorKind::usage, origin_ + ": bad packed layout (" + std::to_string(layout.count) + " samples, " +
                                      std::to_string(layout.target_width) + " targets each)");
  size_ = layout.count;
  sample_ = layout.sample;
  labeled_ = layout.labeled != 0;
  target_width_ = layout.target_width;
}

void PackedSource::read(int64_t index, void* pixels, int32_t* label) const {
  check_index(index);
  const size_t n = sample_.bytes();
  std::memcpy(pixels, base_ + static_cast<size_t>(index) * n, n);
  if (label) {
    *label = -1;
    if (labeled_)
      std::memcpy(label, base_ + layout_.labels_offset() + static_cast<size_t>(index) * sizeof(int32_t), sizeof(int32_t));
  }
}

void PackedSource::read_targets(int64_t index, float* targets) const {
  check_index(index);
  if (target_width_ == 0) throw_error(ErrorKind::usage, origin_ + " has no regression targets");
  std::memcpy(targets, base_ + layout_.targets_offset() + static_cast<size_t>(index * target_width_) * sizeof(float),
              static_cast<size_t>(target_width_) * sizeof(float));
}

}  // namespace hpcnn::data
