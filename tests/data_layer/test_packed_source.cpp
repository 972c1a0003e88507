// Tests of data/packed_source.h: a data set packed into one block (the node-local cache's layout)
// reads back exactly as the ImageSet it was packed from (InMemorySource, the independent reader),
// for each pixel type, with labels, targets or neither, and the block's parts are 8-byte aligned.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "data/packed_source.h"
#include "error_check.h"

using namespace hpcnn::data;
using hpcnn::ErrorKind;

namespace {

ImageSet random_set(int64_t n, SampleInfo info, bool labels, int64_t targets, unsigned seed) {
  std::mt19937 rng(seed);
  ImageSet s;
  s.count = n;
  s.sample = info;
  const size_t values = static_cast<size_t>(n * info.numel());
  if (info.type == PixelType::u8)
    for (size_t i = 0; i < values; ++i) s.pixels_u8.push_back(static_cast<uint8_t>(rng()));
  if (info.type == PixelType::i16)
    for (size_t i = 0; i < values; ++i) s.pixels_i16.push_back(static_cast<int16_t>(rng()));
  if (info.type == PixelType::f32)
    for (size_t i = 0; i < values; ++i) s.pixels_f32.push_back(static_cast<float>(rng()) / 7.0f);
  if (labels) {
    for (int64_t i = 0; i < n; ++i) s.labels.push_back(static_cast<int32_t>(rng() % 10));
    s.labeled = true;
  }
  for (int64_t i = 0; i < n * targets; ++i) s.targets.push_back(static_cast<float>(rng()) / 3.0f);
  s.target_width = targets;
  s.origin = "random-set";
  return s;
}

void same_samples(const SampleSource& a, const SampleSource& b) {
  REQUIRE(a.size() == b.size());
  REQUIRE(a.sample() == b.sample());
  REQUIRE(a.has_labels() == b.has_labels());
  REQUIRE(a.target_width() == b.target_width());
  std::vector<uint8_t> pa(a.sample().bytes()), pb(b.sample().bytes());
  std::vector<float> ta(static_cast<size_t>(a.target_width())), tb(ta.size());
  for (int64_t i = 0; i < a.size(); ++i) {
    int32_t la = 7, lb = 8;
    a.read(i, pa.data(), &la);
    b.read(i, pb.data(), &lb);
    REQUIRE(pa == pb);
    REQUIRE(la == lb);
    if (a.target_width() > 0) {
      a.read_targets(i, ta.data());
      b.read_targets(i, tb.data());
      REQUIRE(std::memcmp(ta.data(), tb.data(), ta.size() * sizeof(float)) == 0);
    }
  }
}

}  // namespace

TEST_CASE("a packed data set reads back as the ImageSet it was packed from", "[data][packed]") {
  struct Case {
    int64_t n;
    SampleInfo info;
    bool labels;
    int64_t targets;
  };
  const Case cases[] = {
      {13, {1, 3, 5, PixelType::u8}, true, 0},         // odd pixel bytes: labels need padding to 8
      {6, {4, 3, 3, PixelType::i16, 3, 3}, false, 4},  // CosmoFlow-like volumes with targets
      {5, {3, 2, 3, PixelType::f32}, false, 0},        // neither labels nor targets
      {0, {1, 2, 2, PixelType::u8}, true, 0},          // empty
  };
  for (const Case& c : cases) {
    ImageSet set = random_set(c.n, c.info, c.labels, c.targets, static_cast<unsigned>(c.n));
    const PackedLayout layout = packed_layout(set);
    CHECK(layout.labels_offset() % 8 == 0);
    CHECK(layout.targets_offset() % 8 == 0);
    CHECK(layout.labels_offset() >= layout.pixel_bytes());
    CHECK(layout.bytes() >= layout.targets_offset() + static_cast<uint64_t>(c.n * c.targets) * 4);
    auto block = std::make_shared<std::vector<uint64_t>>((layout.bytes() + 7) / 8 + 1);  // 8-byte aligned
    pack_images(set, layout, block->data());
    const PackedSource packed(layout, block->data(), block, set.origin);
    CHECK(packed.origin() == "random-set");
    CHECK(packed.in_memory());
    const InMemorySource reference(std::move(set));
    same_samples(packed, reference);
    if (c.n > 0) {
      std::vector<uint8_t> pixels(c.info.bytes());
      hpcnn::testing::check_error([&] { packed.read(c.n, pixels.data(), nullptr); }, ErrorKind::usage, "out of range");
    }
    if (c.targets == 0) {
      float t = 0;
      if (c.n > 0) hpcnn::testing::check_error([&] { packed.read_targets(0, &t); }, ErrorKind::usage, "no regression targets");
    }
  }
}

TEST_CASE("the source keeps its block alive", "[data][packed]") {
  ImageSet set = random_set(4, {1, 2, 2, PixelType::u8}, true, 0, 1);
  const PackedLayout layout = packed_layout(set);
  std::weak_ptr<std::vector<uint64_t>> watch;
  std::unique_ptr<PackedSource> source;
  {
    auto block = std::make_shared<std::vector<uint64_t>>(layout.bytes() / 8 + 1);
    watch = block;
    pack_images(set, layout, block->data());
    source = std::make_unique<PackedSource>(layout, block->data(), block, "kept");
  }
  CHECK(!watch.expired());
  uint8_t px[4];
  int32_t label = -1;
  source->read(3, px, &label);
  CHECK(label == set.labels[3]);
  CHECK(std::memcmp(px, set.pixels_u8.data() + 12, 4) == 0);
  source.reset();
  CHECK(watch.expired());
}
