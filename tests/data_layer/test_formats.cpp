// Tests of data/dataset.h, data/source.h, data/decompress.h: IDX raw/gzip/huffgpu, CIFAR-10
// binary, NPY images, the real Fashion-MNIST files, and clean errors for bad files.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "data/cifar.h"
#include "data/dataset.h"
#include "data/decompress.h"
#include "data/npy.h"
#include "data/source.h"
#include "helpers.h"

using namespace data_test;
using namespace hpcnn::data;
using hpcnn::ErrorKind;

namespace {

// n images of rows x cols with pixel (i, y, x) = (7*i + 3*y + x) mod 256, labels i mod 10.
Bytes pattern_pixels(int n, int rows, int cols) {
  Bytes p;
  for (int i = 0; i < n; ++i)
    for (int y = 0; y < rows; ++y)
      for (int x = 0; x < cols; ++x) p.push_back(static_cast<uint8_t>(7 * i + 3 * y + x));
  return p;
}

Bytes pattern_labels(int n) {
  Bytes l;
  for (int i = 0; i < n; ++i) l.push_back(static_cast<uint8_t>(i % 10));
  return l;
}

// Reads every sample of `src` and compares with `set`.
void check_source_matches(const SampleSource& src, const ImageSet& set) {
  REQUIRE(src.size() == set.count);
  REQUIRE(src.sample() == set.sample);
  REQUIRE(src.has_labels() == set.has_labels());
  Bytes buf(set.sample.bytes());
  for (int64_t i = 0; i < set.count; ++i) {
    int32_t label = -2;
    src.read(i, buf.data(), &label);
    const size_t n = set.sample.bytes();
    const uint8_t* want = static_cast<const uint8_t*>(set.pixels()) + static_cast<size_t>(i) * n;
    REQUIRE(std::memcmp(buf.data(), want, n) == 0);
    CHECK(label == (set.has_labels() ? set.labels[static_cast<size_t>(i)] : -1));
    REQUIRE(src.target_width() == set.target_width);
    if (set.target_width > 0) {
      std::vector<float> t(static_cast<size_t>(set.target_width));
      src.read_targets(i, t.data());
      CHECK(std::equal(t.begin(), t.end(), set.targets.begin() + i * set.target_width));
    }
  }
}

const char* kFashionDir = "/usr/share/datasets/fashion-mnist";

}  // namespace

TEST_CASE("data: IDX images and labels, raw, gzipped and huffgpu-encoded", "[data][idx]") {
  TempDir dir;
  const int n = 5, rows = 4, cols = 3;
  const Bytes pixels = pattern_pixels(n, rows, cols), labels = pattern_labels(n);
  write_file(dir.file("img.idx"), idx_images(n, rows, cols, pixels));
  write_file(dir.file("lbl.idx"), idx_labels(labels));

  const ImageSet raw = load_images(dir.file("img.idx"), dir.file("lbl.idx"));
  CHECK(raw.count == n);
  CHECK(raw.sample == SampleInfo{1, rows, cols, PixelType::u8});
  CHECK(raw.pixels_u8 == pixels);
  CHECK(raw.pixels_f32.empty());
  CHECK(raw.has_labels());
  CHECK(raw.labels == std::vector<int32_t>(labels.begin(), labels.end()));

  SECTION("gzip, also two concatenated members and a gzipped labels file") {
    write_gzip(dir.file("img.idx.gz"), idx_images(n, rows, cols, pixels));
    write_gzip(dir.file("lbl.idx.gz"), idx_labels(labels));
    const ImageSet gz = load_images(dir.file("img.idx.gz"), dir.file("lbl.idx.gz"));
    CHECK(gz.pixels_u8 == raw.pixels_u8);
    CHECK(gz.labels == raw.labels);
    const Bytes whole = idx_images(n, rows, cols, pixels);
    write_gzip(dir.file("a.gz"), Bytes(whole.begin(), whole.begin() + 10));
    write_gzip(dir.file("b.gz"), Bytes(whole.begin() + 10, whole.end()));
    Bytes two = read_file(dir.file("a.gz"));
    const Bytes b = read_file(dir.file("b.gz"));
    two.insert(two.end(), b.begin(), b.end());
    write_file(dir.file("two.idx.gz"), two);
    CHECK(load_images(dir.file("two.idx.gz"), "").pixels_u8 == pixels);
  }

  SECTION("huffgpu, also of a gzipped file") {
    write_huffgpu(dir.file("img.idx"), dir.file("img.idx.huf"), 64);
    write_gzip(dir.file("lbl.idx.gz"), idx_labels(labels));
    write_huffgpu(dir.file("lbl.idx.gz"), dir.file("lbl.idx.gz.huf"), 64);
    const FileBytes fb = read_file_decoded(dir.file("lbl.idx.gz.huf"));
    CHECK(fb.layers == std::vector<Compression>{Compression::huffgpu, Compression::gzip});
    CHECK(fb.name == dir.file("lbl.idx"));
    const ImageSet h = load_images(dir.file("img.idx.huf"), dir.file("lbl.idx.gz.huf"));
    CHECK(h.pixels_u8 == raw.pixels_u8);
    CHECK(h.labels == raw.labels);
  }

  SECTION("no labels") {
    const ImageSet u = load_images(dir.file("img.idx"), "");
    CHECK_FALSE(u.has_labels());
    CHECK(u.labels.empty());
  }

  SECTION("FileSource reads the same samples; open_source picks it for raw files only") {
    FileSource fsrc(dir.file("img.idx"), dir.file("lbl.idx"));
    CHECK_FALSE(fsrc.in_memory());
    check_source_matches(fsrc, raw);
    CHECK(open_source({{dir.file("img.idx")}, {dir.file("lbl.idx")}, false, 0})->in_memory() == false);
    CHECK(open_source({{dir.file("img.idx")}, {dir.file("lbl.idx")}, true, 0})->in_memory() == true);
    write_gzip(dir.file("img.idx.gz"), idx_images(n, rows, cols, pixels));
    auto gz = open_source({{dir.file("img.idx.gz")}, {dir.file("lbl.idx")}, false, 0});
    CHECK(gz->in_memory());
    check_source_matches(*gz, raw);
    const std::string msg = error_of([&] { FileSource(dir.file("img.idx.gz"), ""); }, ErrorKind::usage);
    CHECK_THAT(msg, Catch::Contains("img.idx.gz") && Catch::Contains("gzip"));
  }

  SECTION("several files concatenate, in memory and as files") {
    const ImageSet two = load_images({dir.file("img.idx"), dir.file("img.idx")}, {dir.file("lbl.idx"), dir.file("lbl.idx")});
    CHECK(two.count == 2 * n);
    auto src = open_source({{dir.file("img.idx"), dir.file("img.idx")}, {dir.file("lbl.idx"), dir.file("lbl.idx")}, false, 0});
    check_source_matches(*src, two);
    error_of([&] { load_images({dir.file("img.idx"), dir.file("img.idx")}, {dir.file("lbl.idx")}); }, ErrorKind::usage);
  }
}

TEST_CASE("data: CIFAR-10 binary record layout", "[data][cifar]") {
  TempDir dir;
  // 3 records: label 2*r+1, pixel (c, y, x) = (r + 5*c + y + 3*x) mod 256.
  Bytes file;
  for (int r = 0; r < 3; ++r) {
    file.push_back(static_cast<uint8_t>(2 * r + 1));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) file.push_back(static_cast<uint8_t>(r + 5 * c + y + 3 * x));
  }
  REQUIRE(file.size() == 3 * 3073);
  write_file(dir.file("data_batch_1.bin"), file);
  const ImageSet s = load_images(dir.file("data_batch_1.bin"), "");
  CHECK(s.count == 3);
  CHECK(s.sample == SampleInfo{3, 32, 32, PixelType::u8});
  CHECK(s.labels == std::vector<int32_t>{1, 3, 5});
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; y += 7)
        for (int x = 0; x < 32; x += 5)
          REQUIRE(s.pixels_u8[static_cast<size_t>(((r * 3 + c) * 32 + y) * 32 + x)] ==
                  static_cast<uint8_t>(r + 5 * c + y + 3 * x));

  FileSource fsrc(dir.file("data_batch_1.bin"), "");
  CHECK(fsrc.has_labels());
  check_source_matches(fsrc, s);

  // Compressed CIFAR-10: the .bin name survives the .huf / .gz suffix.
  write_huffgpu(dir.file("data_batch_1.bin"), dir.file("data_batch_1.bin.huf"));
  CHECK(load_images(dir.file("data_batch_1.bin.huf"), "").pixels_u8 == s.pixels_u8);
  write_gzip(dir.file("data_batch_2.bin.gz"), file);
  CHECK(load_images(dir.file("data_batch_2.bin.gz"), "").labels == s.labels);

  // Two batches concatenate.
  const ImageSet both = load_images({dir.file("data_batch_1.bin"), dir.file("data_batch_2.bin.gz")}, {});
  CHECK(both.count == 6);

  // Errors.
  std::string m = error_of([&] { load_images(dir.file("data_batch_1.bin"), dir.file("data_batch_1.bin")); }, ErrorKind::usage);
  CHECK_THAT(m, Catch::Contains("holds its labels"));
  write_file(dir.file("cut.bin"), Bytes(file.begin(), file.end() - 100));
  m = error_of([&] { load_images(dir.file("cut.bin"), ""); }, ErrorKind::bad_input);
  CHECK_THAT(m, Catch::Contains("cut.bin") && Catch::Contains("offset 6146") && Catch::Contains("partial record"));
  error_of([&] { FileSource(dir.file("cut.bin"), ""); }, ErrorKind::bad_input);
  Bytes bad_label = file;
  bad_label[3073] = 10;
  write_file(dir.file("bad.bin"), bad_label);
  m = error_of([&] { load_images(dir.file("bad.bin"), ""); }, ErrorKind::bad_input);
  CHECK_THAT(m, Catch::Contains("bad.bin: offset 3073") && Catch::Contains("label 10"));
  FileSource bad_src(dir.file("bad.bin"), "");
  Bytes buf(3072);
  int32_t label;
  bad_src.read(0, buf.data(), &label);
  error_of([&] { bad_src.read(1, buf.data(), &label); }, ErrorKind::bad_input);
}

TEST_CASE("data: NPY images (u8 NHW, f32 NHWC, f64 NCHW) and integer labels", "[data][npy]") {
  TempDir dir;
  // u8 (4, 2, 3)
  const Bytes u8 = pattern_pixels(4, 2, 3);
  write_file(dir.file("u8.npy"), npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (4, 2, 3), }", u8));
  write_file(dir.file("lbl.npy"),
             npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", raw_bytes(std::vector<int64_t>{3, 1, 4, 1})));
  const ImageSet a = load_images(dir.file("u8.npy"), dir.file("lbl.npy"));
  CHECK(a.sample == SampleInfo{1, 2, 3, PixelType::u8});
  CHECK(a.pixels_u8 == u8);
  CHECK(a.labels == std::vector<int32_t>{3, 1, 4, 1});
  check_source_matches(FileSource(dir.file("u8.npy"), dir.file("lbl.npy")), a);

  // f32 channels-last (2, 2, 2, 3): value (n, h, w, c) = n*100 + h*10 + w + c/10.
  std::vector<float> hwc;
  for (int n = 0; n < 2; ++n)
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 2; ++w)
        for (int c = 0; c < 3; ++c) hwc.push_back(static_cast<float>(n * 100 + h * 10 + w) + static_cast<float>(c) / 10);
  write_file(dir.file("hwc.npy"), npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2, 3), }", raw_bytes(hwc)));
  const ImageSet b = load_images(dir.file("hwc.npy"), "");
  CHECK(b.sample == SampleInfo{3, 2, 2, PixelType::f32});
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      for (int h = 0; h < 2; ++h)
        for (int w = 0; w < 2; ++w)
          CHECK(b.pixels_f32[static_cast<size_t>(((n * 3 + c) * 2 + h) * 2 + w)] ==
                static_cast<float>(n * 100 + h * 10 + w) + static_cast<float>(c) / 10);
  check_source_matches(FileSource(dir.file("hwc.npy"), ""), b);

  // f64 NCHW (2, 1, 2, 2)
  const std::vector<double> f64 = {0.5, 1.5, 2.5, 3.5, -1, -2, -3, 1e-3};
  write_file(dir.file("f64.npy"), npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 1, 2, 2), }", raw_bytes(f64)));
  const ImageSet c = load_images(dir.file("f64.npy"), "");
  CHECK(c.sample == SampleInfo{1, 2, 2, PixelType::f32});
  for (size_t i = 0; i < f64.size(); ++i) CHECK(c.pixels_f32[i] == static_cast<float>(f64[i]));
  check_source_matches(FileSource(dir.file("f64.npy"), ""), c);

  // gzipped .npy decodes in memory.
  write_gzip(dir.file("u8.npy.gz"), read_file(dir.file("u8.npy")));
  CHECK(load_images(dir.file("u8.npy.gz"), dir.file("lbl.npy")).pixels_u8 == u8);

  // Flattened images and integer pixels are refused clearly.
  write_file(dir.file("flat.npy"), npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (4, 6), }", u8));
  CHECK_THAT(error_of([&] { load_images(dir.file("flat.npy"), ""); }, ErrorKind::unsupported),
             Catch::Contains("flat.npy") && Catch::Contains("(N, H, W)"));
  write_file(dir.file("i4.npy"), npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (1, 1, 1), }", Bytes(4)));
  error_of([&] { FileSource(dir.file("i4.npy"), ""); }, ErrorKind::unsupported);
  // Label count mismatch names both files.
  write_file(dir.file("lbl3.npy"), npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", Bytes{1, 2, 3}));
  CHECK_THAT(error_of([&] { load_images(dir.file("u8.npy"), dir.file("lbl3.npy")); }, ErrorKind::bad_input),
             Catch::Contains("lbl3.npy holds 3 labels") && Catch::Contains("u8.npy holds 4 images"));
  error_of([&] { FileSource(dir.file("u8.npy"), dir.file("lbl3.npy")); }, ErrorKind::bad_input);
}

TEST_CASE("data: NPY volumes (i16 NCDHW, f32 NDHWC) with float targets", "[data][npy][volume]") {
  TempDir dir;
  // 2 volumes of 4 channels x 2 x 3 x 2 int16 counts, values = their flat index.
  std::vector<int16_t> counts(2 * 4 * 2 * 3 * 2);
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int16_t>(i);
  write_file(dir.file("v.npy"), npy_file("{'descr': '<i2', 'fortran_order': False, 'shape': (2, 4, 2, 3, 2), }", raw_bytes(counts)));
  const std::vector<float> targets{0.5f, -0.25f, 1.0f, -1.0f, 0.125f, 0.0f};
  write_file(dir.file("t.npy"), npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", raw_bytes(targets)));
  const ImageSet a = load_images(dir.file("v.npy"), dir.file("t.npy"));
  CHECK(a.count == 2);
  CHECK(a.sample == SampleInfo{4, 3, 2, PixelType::i16, 2, 3});
  CHECK(to_string(a.sample) == "4x2x3x2 i16");
  CHECK(a.pixels_i16 == counts);
  CHECK(!a.has_labels());
  CHECK(a.target_width == 3);
  CHECK(a.targets == targets);
  check_source_matches(FileSource(dir.file("v.npy"), dir.file("t.npy")), a);
  check_source_matches(InMemorySource(a), a);
  // (N,) float targets: K = 1; f8 targets are rounded to f32.
  write_file(dir.file("t1.npy"), npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
                                          raw_bytes(std::vector<double>{0.1, -0.2})));
  const ImageSet b = load_images(dir.file("v.npy"), dir.file("t1.npy"));
  CHECK(b.target_width == 1);
  CHECK(b.targets == std::vector<float>{0.1f, -0.2f});

  // Channels last (N, D, H, W, C) becomes NCDHW: element (d, h, w, c) -> (c, d, h, w).
  std::vector<float> dhwc(1 * 2 * 2 * 2 * 3);
  for (size_t i = 0; i < dhwc.size(); ++i) dhwc[i] = static_cast<float>(i);
  write_file(dir.file("dhwc.npy"), npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 2, 2, 3), }", raw_bytes(dhwc)));
  const ImageSet c = load_images(dir.file("dhwc.npy"), "");
  CHECK(c.sample == SampleInfo{3, 2, 2, PixelType::f32, 2, 3});
  for (int ch = 0; ch < 3; ++ch)
    for (int p = 0; p < 8; ++p) CHECK(c.pixels_f32[static_cast<size_t>(ch * 8 + p)] == static_cast<float>(p * 3 + ch));
  check_source_matches(FileSource(dir.file("dhwc.npy"), ""), c);

  // Errors: row count, NaN/Inf (naming the sample and target), an int16 file whose header says f4.
  write_file(dir.file("t_short.npy"), npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), }",
                                               raw_bytes(std::vector<float>{1, 2, 3})));
  CHECK_THAT(error_of([&] { load_images(dir.file("v.npy"), dir.file("t_short.npy")); }, ErrorKind::bad_input),
             Catch::Contains("t_short.npy holds 1 target rows but") && Catch::Contains("v.npy holds 2 images"));
  error_of([&] { FileSource(dir.file("v.npy"), dir.file("t_short.npy")); }, ErrorKind::bad_input);
  std::vector<float> nan_targets = targets;
  nan_targets[4] = std::nanf("");
  write_file(dir.file("t_nan.npy"), npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", raw_bytes(nan_targets)));
  CHECK_THAT(error_of([&] { load_images(dir.file("v.npy"), dir.file("t_nan.npy")); }, ErrorKind::bad_input),
             Catch::Contains("t_nan.npy: target 1 of sample 1 is nan"));
  write_file(dir.file("as_f4.npy"), npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4, 2, 3, 2), }", raw_bytes(counts)));
  CHECK_THAT(error_of([&] { load_images(dir.file("as_f4.npy"), ""); }, ErrorKind::bad_input), Catch::Contains("as_f4.npy: offset"));
  error_of([&] { FileSource(dir.file("as_f4.npy"), ""); }, ErrorKind::bad_input);
  // Concatenated parts must agree in their targets.
  CHECK_THAT(error_of([&] { load_images({dir.file("v.npy"), dir.file("v.npy")}, {dir.file("t.npy"), dir.file("t1.npy")}); },
                      ErrorKind::bad_input),
             Catch::Contains("has 1 targets per sample"));
}

TEST_CASE("data: read_npy_header reads the header and checks the data size only", "[data][npy]") {
  TempDir dir;
  const Bytes f = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", Bytes(24, 0x40));
  write_file(dir.file("a.npy"), f);
  uint64_t offset = 0;
  const NpyArray a = read_npy_header(dir.file("a.npy"), &offset);
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  CHECK(a.dtype == "<f4");
  CHECK(a.bytes.empty());
  CHECK(offset == f.size() - 24);
  CHECK(offset % 64 == 0);
  write_file(dir.file("cut.npy"), Bytes(f.begin(), f.end() - 1));
  CHECK_THAT(error_of([&] { read_npy_header(dir.file("cut.npy"), &offset); }, ErrorKind::bad_input),
             Catch::Contains("cut.npy: offset " + std::to_string(f.size() - 1) + ": truncated data"));
}

TEST_CASE("data: truncated, corrupted, empty and unrecognised files fail naming the file", "[data][errors]") {
  TempDir dir;
  const Bytes good = idx_images(3, 4, 4, pattern_pixels(3, 4, 4));
  write_file(dir.file("good.idx"), good);

  SECTION("missing file: io") {
    CHECK_THAT(error_of([&] { load_images(dir.file("missing.idx"), ""); }, ErrorKind::io), Catch::Contains("missing.idx"));
    error_of([&] { FileSource(dir.file("missing.idx"), ""); }, ErrorKind::io);
  }
  SECTION("empty file") {
    write_file(dir.file("empty.idx"), {});
    CHECK_THAT(error_of([&] { load_images(dir.file("empty.idx"), ""); }, ErrorKind::bad_input),
               Catch::Contains("empty.idx: offset 0: empty file"));
    error_of([&] { FileSource(dir.file("empty.idx"), ""); }, ErrorKind::bad_input);
    write_file(dir.file("empty.gz"), {});
    error_of([&] { load_images(dir.file("empty.gz"), ""); }, ErrorKind::bad_input);
  }
  SECTION("truncated IDX data and header") {
    write_file(dir.file("cut.idx"), Bytes(good.begin(), good.end() - 5));
    std::string m = error_of([&] { load_images(dir.file("cut.idx"), ""); }, ErrorKind::bad_input);
    CHECK_THAT(m, Catch::Contains("cut.idx: offset 59") && Catch::Contains("truncated data"));
    m = error_of([&] { FileSource(dir.file("cut.idx"), ""); }, ErrorKind::bad_input);
    CHECK_THAT(m, Catch::Contains("cut.idx") && Catch::Contains("truncated"));
    write_file(dir.file("head.idx"), Bytes(good.begin(), good.begin() + 9));
    CHECK_THAT(error_of([&] { load_images(dir.file("head.idx"), ""); }, ErrorKind::bad_input),
               Catch::Contains("head.idx: offset 9: truncated IDX header"));
    Bytes longer = good;
    longer.push_back(0);
    write_file(dir.file("long.idx"), longer);
    CHECK_THAT(error_of([&] { load_images(dir.file("long.idx"), ""); }, ErrorKind::bad_input),
               Catch::Contains("long.idx: offset 64: 1 unexpected bytes"));
  }
  SECTION("IDX of another element type or role") {
    Bytes f = good;
    f[2] = 0x0D;
    write_file(dir.file("float.idx"), f);
    CHECK_THAT(error_of([&] { load_images(dir.file("float.idx"), ""); }, ErrorKind::unsupported),
               Catch::Contains("float.idx: offset 2") && Catch::Contains("float"));
    write_file(dir.file("lbl.idx"), idx_labels({1, 2, 3}));
    CHECK_THAT(error_of([&] { load_images(dir.file("lbl.idx"), ""); }, ErrorKind::bad_input),
               Catch::Contains("lbl.idx") && Catch::Contains("a labels file?"));
    CHECK_THAT(error_of([&] { load_images(dir.file("good.idx"), dir.file("good.idx")); }, ErrorKind::bad_input),
               Catch::Contains("good.idx") && Catch::Contains("an images file?"));
  }
  SECTION("gzip: truncated and corrupted") {
    write_gzip(dir.file("g.idx.gz"), good);
    const Bytes gz = read_file(dir.file("g.idx.gz"));
    write_file(dir.file("cut.idx.gz"), Bytes(gz.begin(), gz.end() - 6));
    std::string m = error_of([&] { load_images(dir.file("cut.idx.gz"), ""); }, ErrorKind::bad_input);
    CHECK_THAT(m, Catch::Contains("cut.idx.gz: offset") && Catch::Contains("truncated gzip"));
    Bytes bad = gz;
    bad[gz.size() - 5] ^= 0xff;  // the stored length / CRC
    write_file(dir.file("crc.idx.gz"), bad);
    m = error_of([&] { load_images(dir.file("crc.idx.gz"), ""); }, ErrorKind::bad_input);
    CHECK_THAT(m, Catch::Contains("crc.idx.gz: offset") && Catch::Contains("corrupt gzip"));
    Bytes trailing = gz;
    trailing.push_back('x');
    write_file(dir.file("trail.idx.gz"), trailing);
    m = error_of([&] { load_images(dir.file("trail.idx.gz"), ""); }, ErrorKind::bad_input);
    CHECK_THAT(m, Catch::Contains("trail.idx.gz: offset " + std::to_string(gz.size())) && Catch::Contains("after the gzip"));
    // A gzipped file whose content is a truncated IDX: the offset is into the decompressed bytes.
    write_gzip(dir.file("inner.idx.gz"), Bytes(good.begin(), good.end() - 1));
    m = error_of([&] { load_images(dir.file("inner.idx.gz"), ""); }, ErrorKind::bad_input);
    CHECK_THAT(m, Catch::Contains("inner.idx.gz (after gzip): offset 63"));
  }
  SECTION("huffgpu: truncated and corrupted") {
    Bytes big;
    for (int i = 0; i < 20000; ++i) big.push_back(static_cast<uint8_t>((i * i) >> 5));
    write_file(dir.file("big.idx"), idx_images(20, 25, 40, big));
    write_huffgpu(dir.file("big.idx"), dir.file("big.idx.huf"), 4096);
    const Bytes enc = read_file(dir.file("big.idx.huf"));
    write_file(dir.file("cut.idx.huf"), Bytes(enc.begin(), enc.begin() + static_cast<long>(enc.size() / 2)));
    std::string m = error_of([&] { load_images(dir.file("cut.idx.huf"), ""); }, ErrorKind::bad_input);
    CHECK_THAT(m, Catch::Contains("cut.idx.huf: huffgpu stream") && Catch::Contains("truncated"));
    Bytes bad = enc;
    bad[enc.size() / 2] ^= 0x5a;
    write_file(dir.file("bad.idx.huf"), bad);
    m = error_of([&] { load_images(dir.file("bad.idx.huf"), ""); }, ErrorKind::bad_input);
    CHECK_THAT(m, Catch::Contains("bad.idx.huf: huffgpu stream"));
  }
  SECTION("unrecognised content") {
    write_file(dir.file("text.txt"), Bytes{'h', 'e', 'l', 'l', 'o'});
    CHECK_THAT(error_of([&] { load_images(dir.file("text.txt"), ""); }, ErrorKind::bad_input),
               Catch::Contains("text.txt: offset 0: unrecognised data file") && Catch::Contains("68 65 6c 6c 6f"));
  }
  SECTION("source index out of range") {
    FileSource s(dir.file("good.idx"), "");
    Bytes buf(16);
    error_of([&] { s.read(3, buf.data(), nullptr); }, ErrorKind::usage);
    error_of([&] { s.read(-1, buf.data(), nullptr); }, ErrorKind::usage);
  }
}

TEST_CASE("data: the real Fashion-MNIST files (Debian dataset-fashion-mnist)", "[data][fashion]") {
  const std::string images = std::string(kFashionDir) + "/t10k-images-idx3-ubyte.gz";
  const std::string labels = std::string(kFashionDir) + "/t10k-labels-idx1-ubyte.gz";
  // scripts/setup.sh installs the dataset: its absence is a failure, not a skip.
  INFO(images << " is missing: scripts/setup.sh installs the Debian package dataset-fashion-mnist");
  REQUIRE(std::filesystem::exists(images));
  REQUIRE(std::filesystem::exists(labels));
  const ImageSet t = load_images(images, labels);
  CHECK(t.count == 10000);
  CHECK(t.sample == SampleInfo{1, 28, 28, PixelType::u8});
  std::vector<int> per_class(10);
  for (int32_t l : t.labels) {
    REQUIRE(l >= 0);
    REQUIRE(l < 10);
    ++per_class[static_cast<size_t>(l)];
  }
  CHECK(per_class == std::vector<int>(10, 1000));  // the test set is balanced
  CHECK(t.labels[0] == 9);                         // the first test image is an ankle boot
  CHECK(*std::max_element(t.pixels_u8.begin(), t.pixels_u8.end()) == 255);

  // The decompressed file, its huffgpu encoding and a FileSource over it agree with the .gz.
  TempDir dir;
  const FileBytes raw = read_file_decoded(images);
  write_file(dir.file("t10k-images.idx"), raw.bytes);
  write_huffgpu(dir.file("t10k-images.idx"), dir.file("t10k-images.idx.huf"), 1u << 20);
  CHECK(read_file(dir.file("t10k-images.idx.huf")).size() < raw.bytes.size());
  const ImageSet h = load_images(dir.file("t10k-images.idx.huf"), labels);
  CHECK(h.pixels_u8 == t.pixels_u8);
  CHECK(h.labels == t.labels);
  FileSource fsrc(dir.file("t10k-images.idx"), labels);
  Bytes buf(784);
  for (int64_t i : {int64_t{0}, int64_t{4321}, int64_t{9999}}) {
    int32_t l;
    fsrc.read(i, buf.data(), &l);
    CHECK(std::memcmp(buf.data(), t.pixels_u8.data() + i * 784, 784) == 0);
    CHECK(l == t.labels[static_cast<size_t>(i)]);
  }
}
