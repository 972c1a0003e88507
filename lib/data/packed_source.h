// hpcnn data: a decoded data set packed into one flat block of memory that the source reads but
// does not own: dist-train's node-local cache (measure/node_cache.h; issue 44 item 3, the Fugaku
// CosmoFlow I/O tuning), where one rank of each node decodes the compressed shards into memory
// the node's ranks share, and every rank reads its samples from there.
//
// The block, for a PackedLayout L (offsets in bytes from its start, each a multiple of 8):
//   [0, L.pixel_bytes())                      count samples of L.sample.bytes() bytes each, C(D)HW,
//                                              u8 / i16 / f32 by L.sample.type (as ImageSet stores them)
//   [L.labels_offset(), + count * 4)          int32 class labels, when L.labeled
//   [L.targets_offset(), + count * K * 4)     float regression targets, K = L.target_width
// No data of this lib/data module knows about MPI: the block comes from whoever shares it
// (dist/node_buffer.h), with a keeper that holds it alive for as long as the source lives.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/dataset.h"
#include "data/source.h"

namespace hpcnn::data {

// Trivially copyable (sent as bytes from the rank that decoded to the others).
struct PackedLayout {
  int64_t count = 0;         // samples
  SampleInfo sample;         // shape and pixel type of each
  int64_t target_width = 0;  // K regression targets per sample (0: none)
  uint8_t labeled = 0;       // class labels present

  uint64_t pixel_bytes() const;
  uint64_t labels_offset() const;
  uint64_t targets_offset() const;
  uint64_t bytes() const;  // the whole block
};

// The layout of `set`, and `set` written into `dst` (layout.bytes() bytes) by that layout.
PackedLayout packed_layout(const ImageSet& set);
void pack_images(const ImageSet& set, const PackedLayout& layout, void* dst);

// The samples of a block laid out by `layout` at `base` (which `keeper` holds alive), read by
// copying as InMemorySource does. `origin` names the files in messages. ErrorKind::usage for a
// layout with a negative count or width, or a null base with a non-empty layout.
class PackedSource final : public SampleSource {
 public:
  PackedSource(const PackedLayout& layout, const void* base, std::shared_ptr<const void> keeper, std::string origin);
  bool in_memory() const override { return true; }
  void read(int64_t index, void* pixels, int32_t* label) const override;
  void read_targets(int64_t index, float* targets) const override;

 private:
  PackedLayout layout_;
  const uint8_t* base_;
  std::shared_ptr<const void> keeper_;
};

}  // namespace hpcnn::data
