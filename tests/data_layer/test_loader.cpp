// Tests of data/epoch_plan.h and data/loader.h: rank sharding of every epoch's permutation,
// determinism, evaluation shards, augmentation on/off, the bounded prefetch queue, errors.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "data/epoch_plan.h"
#include "data/loader.h"
#include "helpers.h"

using namespace hpcnn::data;
using namespace data_test;
using hpcnn::ErrorKind;

namespace {

// n samples of 1 x 2 x 2 u8 whose pixels all hold index mod 256 (n <= 256), label index mod 10.
std::shared_ptr<const SampleSource> index_source(int n) {
  ImageSet s;
  s.count = n;
  s.sample = {1, 2, 2, PixelType::u8};
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < 4; ++k) s.pixels_u8.push_back(static_cast<uint8_t>(i));
    s.labels.push_back(i % 10);
  }
  s.labeled = true;
  s.origin = "index-source";
  return std::make_shared<InMemorySource>(std::move(s));
}

// n random 3 x 8 x 8 u8 images (deterministic).
std::shared_ptr<const SampleSource> random_source(int n) {
  ImageSet s;
  s.count = n;
  s.sample = {3, 8, 8, PixelType::u8};
  std::mt19937_64 rng(99);
  for (int64_t i = 0; i < n * s.sample.numel(); ++i) s.pixels_u8.push_back(static_cast<uint8_t>(rng()));
  s.origin = "random-source";
  return std::make_shared<InMemorySource>(std::move(s));
}

// Counts read() calls of the wrapped source.
class CountingSource final : public SampleSource {
 public:
  explicit CountingSource(std::shared_ptr<const SampleSource> inner) : inner_(std::move(inner)) {
    size_ = inner_->size();
    sample_ = inner_->sample();
    labeled_ = inner_->has_labels();
    origin_ = inner_->origin();
  }
  bool in_memory() const override { return true; }
  void read(int64_t index, void* pixels, int32_t* label) const override {
    ++reads;
    inner_->read(index, pixels, label);
  }
  mutable std::atomic<int64_t> reads{0};

 private:
  std::shared_ptr<const SampleSource> inner_;
};

std::vector<Batch> whole_epoch(BatchLoader& l, int64_t epoch) {
  l.start_epoch(epoch);
  std::vector<Batch> out;
  while (auto b = l.next_batch()) out.push_back(std::move(*b));
  return out;
}

LoaderOptions train_options(int64_t batch, int rank, int world, uint64_t seed = 1) {
  LoaderOptions o;
  o.batch_size = batch;
  o.rank = rank;
  o.world_size = world;
  o.seed = seed;
  return o;
}

bool same_images(const Batch& a, const Batch& b) {
  return a.images.shape() == b.images.shape() && std::equal(a.images.data(), a.images.data() + a.images.numel(), b.images.data());
}

}  // namespace

TEST_CASE("epoch plan: permutations are deterministic per (seed, epoch) and differ across epochs", "[data][loader]") {
  const std::vector<int64_t> p = epoch_permutation(1000, 5, 3);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) REQUIRE(sorted[static_cast<size_t>(i)] == i);
  CHECK(epoch_permutation(1000, 5, 3) == p);
  CHECK(epoch_permutation(1000, 5, 4) != p);
  CHECK(epoch_permutation(1000, 6, 3) != p);
  CHECK(epoch_permutation(0, 5, 3).empty());
  CHECK(train_steps_per_epoch(103, 4, 5) == 5);
  CHECK(eval_shard(10, 0, 3) == std::pair<int64_t, int64_t>{0, 3});
  CHECK(eval_shard(10, 2, 3) == std::pair<int64_t, int64_t>{6, 10});
  CHECK(eval_steps(10, 2, 3, 3) == 2);
  error_of([] { train_steps_per_epoch(10, 0, 1); }, ErrorKind::usage);
  error_of([] { eval_shard(10, 3, 3); }, ErrorKind::usage);
}

TEST_CASE("loader: the ranks of an epoch read disjoint samples of one shared permutation", "[data][loader]") {
  const int N = 103, W = 4, B = 5;
  auto src = index_source(N);
  for (int64_t epoch : {0, 1, 7}) {
    const std::vector<int64_t> perm = epoch_permutation(N, 1, epoch);
    std::set<int64_t> all;
    std::map<int64_t, int64_t> position;  // sample -> permutation position
    for (int64_t i = 0; i < N; ++i) position[perm[static_cast<size_t>(i)]] = i;
    for (int r = 0; r < W; ++r) {
      LoaderOptions o = train_options(B, r, W);
      o.threads = r % 2 ? 3 : 1;
      BatchLoader l(src, o);
      REQUIRE(l.steps_per_epoch() == 5);
      CHECK(l.samples_per_epoch() == 25);
      const std::vector<Batch> batches = whole_epoch(l, epoch);
      REQUIRE(batches.size() == 5);
      for (size_t s = 0; s < batches.size(); ++s) {
        const Batch& b = batches[s];
        CHECK(b.epoch == epoch);
        CHECK(b.step == static_cast<int64_t>(s));
        REQUIRE(b.images.shape() == hpcnn::Shape{B, 1, 2, 2});
        REQUIRE(b.indices.size() == static_cast<size_t>(B));
        for (int j = 0; j < B; ++j) {
          const int64_t idx = b.indices[static_cast<size_t>(j)];
          // Rank r's slot of the shared permutation.
          CHECK(position[idx] == (static_cast<int64_t>(s) * W + r) * B + j);
          // The pixels and label are the sample's (augmentation only normalises here: pad 0, no flip).
          for (int k = 0; k < 4; ++k) CHECK(std::lround(b.images.data()[j * 4 + k] * 255.0f) == idx);
          CHECK(b.labels[static_cast<size_t>(j)] == idx % 10);
          CHECK(all.insert(idx).second);  // no duplicates across ranks and steps
        }
      }
    }
    CHECK(all.size() == static_cast<size_t>(W * B * 5));  // 100: the 3 left over are dropped
  }
}

TEST_CASE("loader: batches are deterministic for a seed, whatever the threads, rank or world size", "[data][loader]") {
  auto src = random_source(64);
  LoaderOptions o = train_options(8, 0, 1, 123);
  o.augment.crop_padding = 2;
  o.augment.horizontal_flip = true;
  o.augment.mean = {0.5f, 0.4f, 0.3f};
  o.augment.std = {0.2f, 0.25f, 0.3f};
  BatchLoader a(src, o);
  LoaderOptions o3 = o;
  o3.threads = 3;
  o3.prefetch = 1;
  BatchLoader b(src, o3);
  const std::vector<Batch> ea = whole_epoch(a, 2), eb = whole_epoch(b, 2);
  REQUIRE(ea.size() == 8);
  REQUIRE(eb.size() == 8);
  for (size_t i = 0; i < ea.size(); ++i) {
    CHECK(ea[i].indices == eb[i].indices);
    CHECK(same_images(ea[i], eb[i]));
  }
  // A different seed shuffles and augments differently.
  LoaderOptions o2 = o;
  o2.seed = 124;
  BatchLoader c(src, o2);
  CHECK(whole_epoch(c, 2)[0].indices != ea[0].indices);
  // Sample k looks the same on rank 1 of 2 as on the single rank: its draws depend on (seed, epoch, k).
  BatchLoader r1(src, [&] {
    LoaderOptions x = o;
    x.rank = 1;
    x.world_size = 2;
    x.batch_size = 4;
    return x;
  }());
  const Batch other = whole_epoch(r1, 2)[0];
  const int64_t numel = 3 * 8 * 8;
  for (size_t j = 0; j < other.indices.size(); ++j) {
    bool found = false;
    for (const Batch& bb : ea)
      for (size_t q = 0; q < bb.indices.size(); ++q)
        if (bb.indices[q] == other.indices[j]) {
          found = std::equal(bb.images.data() + static_cast<int64_t>(q) * numel,
                             bb.images.data() + static_cast<int64_t>(q + 1) * numel,
                             other.images.data() + static_cast<int64_t>(j) * numel);
        }
    CHECK(found);
  }
}

TEST_CASE("loader: set_augment(false) leaves only normalisation from the next epoch", "[data][loader]") {
  auto src = random_source(16);
  LoaderOptions o = train_options(16, 0, 1, 9);
  o.augment.crop_padding = 3;
  o.augment.horizontal_flip = true;
  BatchLoader l(src, o);
  const Batch aug = whole_epoch(l, 0)[0];
  l.set_augment(false);
  const Batch plain = whole_epoch(l, 1)[0];
  const auto* mem = dynamic_cast<const InMemorySource*>(src.get());
  REQUIRE(mem);
  auto plain_value = [&](const Batch& b, size_t j, int64_t k) {
    return static_cast<float>(mem->images().pixels_u8[static_cast<size_t>(b.indices[j] * 192 + k)]) / 255.0f;
  };
  int augmented_differs = 0;
  for (size_t j = 0; j < 16; ++j)
    for (int64_t k = 0; k < 192; ++k) {
      REQUIRE(plain.images.data()[static_cast<int64_t>(j) * 192 + k] == Approx(plain_value(plain, j, k)).margin(1e-6));
      augmented_differs += std::abs(aug.images.data()[static_cast<int64_t>(j) * 192 + k] - plain_value(aug, j, k)) > 1e-6f;
    }
  CHECK(augmented_differs > 0);
  l.set_augment(true);
  const Batch again = whole_epoch(l, 0)[0];
  CHECK(same_images(again, aug));
}

TEST_CASE("loader: evaluation reads every sample once, in order, in contiguous rank shards", "[data][loader]") {
  const int N = 103, W = 3, B = 8;
  auto src = index_source(N);
  std::vector<int64_t> seen;
  for (int r = 0; r < W; ++r) {
    LoaderOptions o = train_options(B, r, W);
    o.mode = LoaderMode::evaluate;
    o.augment.crop_padding = 4;  // ignored in evaluation
    o.augment.horizontal_flip = true;
    BatchLoader l(src, o);
    const auto [begin, end] = eval_shard(N, r, W);
    CHECK(l.samples_per_epoch() == end - begin);
    const std::vector<Batch> batches = whole_epoch(l, 0);
    CHECK(static_cast<int64_t>(batches.size()) == l.steps_per_epoch());
    for (size_t s = 0; s < batches.size(); ++s) {
      const Batch& b = batches[s];
      const int64_t n = b.images.dim(0);
      CHECK(n == (s + 1 < batches.size() ? B : (end - begin) - B * static_cast<int64_t>(s)));
      for (int64_t j = 0; j < n; ++j) {
        CHECK(std::lround(b.images.data()[j * 4] * 255.0f) == b.indices[static_cast<size_t>(j)]);
        seen.push_back(b.indices[static_cast<size_t>(j)]);
      }
    }
  }
  std::vector<int64_t> all(N);
  for (int i = 0; i < N; ++i) all[static_cast<size_t>(i)] = i;
  CHECK(seen == all);
  // More ranks than samples: some shards are empty.
  LoaderOptions o = train_options(4, 0, 5);  // shards of 3 samples over 5 ranks: [0, 0), [0, 1), ...
  o.mode = LoaderMode::evaluate;
  BatchLoader tiny(index_source(3), o);
  CHECK(tiny.steps_per_epoch() == 0);
  CHECK(whole_epoch(tiny, 0).empty());
}

TEST_CASE("loader: the prefetch queue is bounded", "[data][loader]") {
  auto counting = std::make_shared<CountingSource>(index_source(200));
  LoaderOptions o = train_options(4, 0, 1);
  o.prefetch = 2;
  BatchLoader l(counting, o);
  l.start_epoch(0);
  // Wait until the queue is full, then give the thread time to overrun it if it would.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (l.ready() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(l.ready() == 2);
  CHECK(counting->reads.load() <= (2 + 1) * 4);  // the queue plus at most the batch being built
  int64_t taken = 0;
  while (auto b = l.next_batch()) {
    ++taken;
    CHECK(l.ready() <= 2);
  }
  CHECK(taken == 50);
  CHECK(counting->reads.load() == 200);
  // The next epoch starts afresh; starting one mid-epoch discards the rest of the old one.
  l.start_epoch(1);
  REQUIRE(l.next_batch().has_value());
  l.start_epoch(2);
  int64_t n2 = 0;
  while (auto b = l.next_batch()) {
    CHECK(b->epoch == 2);
    ++n2;
  }
  CHECK(n2 == 50);
}

TEST_CASE("loader: option errors, errors of the loader thread and shutdown mid-epoch", "[data][loader]") {
  auto src = index_source(10);
  error_of([&] { BatchLoader(src, train_options(3, 0, 4)); }, ErrorKind::usage);  // 10 < 4*3
  error_of([&] { BatchLoader(src, train_options(0, 0, 1)); }, ErrorKind::usage);
  error_of([&] { BatchLoader(src, train_options(1, 2, 2)); }, ErrorKind::usage);
  LoaderOptions bad = train_options(2, 0, 1);
  bad.prefetch = 0;
  error_of([&] { BatchLoader(src, bad); }, ErrorKind::usage);
  {
    BatchLoader l(src, train_options(2, 0, 1));
    error_of([&] { l.next_batch(); }, ErrorKind::usage);  // before start_epoch
  }
  {
    // Destroyed with a full queue and the thread waiting: joins cleanly.
    BatchLoader l(src, train_options(1, 0, 1));
    l.start_epoch(0);
    REQUIRE(l.next_batch().has_value());
  }

  // A file truncated after it was opened: the loader thread's error reaches next_batch().
  TempDir dir;
  Bytes pixels(40 * 16);
  write_file(dir.file("img.idx"), idx_images(40, 4, 4, pixels));
  auto fsrc = std::make_shared<FileSource>(dir.file("img.idx"), "");
  LoaderOptions o = train_options(10, 0, 1);
  o.mode = LoaderMode::evaluate;
  BatchLoader l(fsrc, o);
  std::filesystem::resize_file(dir.file("img.idx"), 16 + 25 * 16);  // samples 25.. are gone
  l.start_epoch(0);
  REQUIRE(l.next_batch().has_value());
  REQUIRE(l.next_batch().has_value());
  const std::string m = error_of([&] { l.next_batch(); }, ErrorKind::bad_input);
  CHECK_THAT(
      m, Catch::Contains("img.idx") && Catch::Contains("truncated") && Catch::Contains("while loading epoch 0, step 2 (rank 0)"));
  error_of([&] { l.next_batch(); }, ErrorKind::bad_input);  // stays failed
  error_of([&] { l.start_epoch(1); }, ErrorKind::bad_input);
}

TEST_CASE("loader: FileSource and the cached source give the same batches", "[data][loader]") {
  TempDir dir;
  Bytes pixels;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 30 * 36; ++i) pixels.push_back(static_cast<uint8_t>(rng()));
  Bytes labels;
  for (int i = 0; i < 30; ++i) labels.push_back(static_cast<uint8_t>(i % 7));
  write_file(dir.file("img.idx"), idx_images(30, 6, 6, pixels));
  write_file(dir.file("lbl.idx"), idx_labels(labels));
  LoaderOptions o = train_options(4, 1, 2, 77);
  o.augment.crop_padding = 1;
  o.augment.horizontal_flip = true;
  BatchLoader cached(open_source({{dir.file("img.idx")}, {dir.file("lbl.idx")}, true, 0}), o);
  BatchLoader streamed(open_source({{dir.file("img.idx")}, {dir.file("lbl.idx")}, false, 0}), o);
  CHECK(cached.source().in_memory());
  CHECK_FALSE(streamed.source().in_memory());
  const std::vector<Batch> a = whole_epoch(cached, 5), b = whole_epoch(streamed, 5);
  REQUIRE(a.size() == 3);
  REQUIRE(b.size() == 3);
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].indices == b[i].indices);
    CHECK(a[i].labels == b[i].labels);
    CHECK(same_images(a[i], b[i]));
  }
}

namespace {

// Planes [first, first + count) along D of a batch of volumes [n, C, D, H, W] (the reference cut).
std::vector<float> depth_planes(const hpcnn::Tensor& t, int64_t first, int64_t count) {
  const int64_t nc = t.dim(0) * t.dim(1), D = t.dim(2), plane = t.dim(3) * t.dim(4);
  std::vector<float> out;
  for (int64_t i = 0; i < nc; ++i)
    out.insert(out.end(), t.data() + (i * D + first) * plane, t.data() + (i * D + first + count) * plane);
  return out;
}

}  // namespace

TEST_CASE("loader: a spatial slab reads only its planes and equals the cut of the whole volume", "[data][loader][spatial]") {
  // 12 int16 volumes [4, 4, 4, 4], channels first: the file holds each slab as runs of its own.
  TempDir dir;
  const int64_t N = 12, C = 4, D = 4;
  Bytes data;
  std::mt19937_64 rng(5);
  for (int64_t i = 0; i < N * C * D * D * D; ++i) {
    const auto v = static_cast<int16_t>(rng() % 300);
    data.push_back(static_cast<uint8_t>(v & 0xff));
    data.push_back(static_cast<uint8_t>(v >> 8));
  }
  const std::string path = dir.file("vol.npy");
  write_file(path, npy_file("{'descr': '<i2', 'fortran_order': False, 'shape': (12, 4, 4, 4, 4), }", data));
  for (const bool augment : {false, true})
    for (const int S : {2, 4})
      for (const bool cache : {false, true}) {
        INFO("augment " << augment << ", slabs " << S << ", cache " << cache);
        LoaderOptions o = train_options(3, 0, 2, 11);
        o.augment.log1p = true;
        o.augment.random_flips_3d = augment;
        o.augment.random_axis_permutation = augment;
        BatchLoader whole(open_source({{path}, {}, cache, 0}), o);
        const std::vector<Batch> ref = whole_epoch(whole, 2);
        for (int s = 0; s < S; ++s) {
          LoaderOptions os = o;
          os.slab = s;
          os.slabs = S;
          auto src = open_source({{path}, {}, cache, 0});
          BatchLoader part(src, os);
          const std::vector<Batch> got = whole_epoch(part, 2);
          REQUIRE(got.size() == ref.size());
          for (size_t b = 0; b < got.size(); ++b) {
            CHECK(got[b].indices == ref[b].indices);
            REQUIRE(got[b].images.shape() == hpcnn::Shape{3, C, D / S, D, D});
            const std::vector<float> want = depth_planes(ref[b].images, s * D / S, D / S);
            CHECK(std::equal(want.begin(), want.end(), got[b].images.data()));
          }
          // Only the slab's bytes were read: C x D/S x H x W int16 values per sample.
          const int64_t samples = static_cast<int64_t>(got.size()) * 3;
          CHECK(src->bytes_read() == (cache ? 0 : samples * C * (D / S) * D * D * 2));
        }
      }
  // Slabs that do not fit are refused before any read.
  LoaderOptions bad = train_options(3, 0, 1);
  bad.slabs = 3;
  CHECK(error_of([&] { BatchLoader l(open_source({{path}, {}, false, 0}), bad); }, ErrorKind::usage).find("do not split into 3 depth slabs") !=
        std::string::npos);
  bad.slabs = 2;
  CHECK(error_of([&] { BatchLoader l(random_source(8), bad); }, ErrorKind::usage).find("(not volumes)") != std::string::npos);
  bad.slab = 2;
  CHECK(error_of([&] { BatchLoader l(open_source({{path}, {}, false, 0}), bad); }, ErrorKind::usage).find("slab 2 of 2 slabs") != std::string::npos);
}
