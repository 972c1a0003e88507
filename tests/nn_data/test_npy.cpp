// Tests of data/npy.h on files written by numpy (tests/data/npy/, made by
// tests/fixtures/make_npy_fixtures.py) and on truncated / corrupted variants built here.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/npy.h"

#ifndef HPCNN_TEST_DATA_DIR
#error "HPCNN_TEST_DATA_DIR must name tests/data"
#endif

namespace fs = std::filesystem;
using hpcnn::Error;
using hpcnn::ErrorKind;
using namespace hpcnn::data;

namespace {

std::string npy_path(const std::string& name) { return std::string(HPCNN_TEST_DATA_DIR) + "/npy/" + name; }

std::vector<unsigned char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// An .npy image with the given version, header dict text (padded with spaces and a newline
// to a multiple of 64 like numpy does) and data bytes.
std::vector<unsigned char> make_npy(int major, const std::string& dict, const std::vector<unsigned char>& data) {
  const size_t pre = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((pre + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::vector<unsigned char> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(major), 0};
  const size_t len = header.size();
  out.push_back(static_cast<unsigned char>(len & 0xff));
  out.push_back(static_cast<unsigned char>((len >> 8) & 0xff));
  if (major != 1) {
    out.push_back(static_cast<unsigned char>((len >> 16) & 0xff));
    out.push_back(static_cast<unsigned char>((len >> 24) & 0xff));
  }
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<unsigned char> f4_bytes(const std::vector<float>& v) {
  std::vector<unsigned char> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Runs fn, which must throw hpcnn::Error of `kind`; returns the message.
template <class Fn>
std::string error_of(Fn&& fn, ErrorKind kind) {
  try {
    fn();
  } catch (const Error& e) {
    CHECK(e.kind() == kind);
    return e.what();
  }
  FAIL("no hpcnn::Error thrown");
  return {};
}

std::string parse_error(const std::vector<unsigned char>& img, ErrorKind kind) {
  return error_of([&] { parse_npy(img, "mem.npy"); }, kind);
}

fs::path temp_file(const std::string& name, const std::vector<unsigned char>& bytes) {
  fs::path d = fs::temp_directory_path() / ("hpcnn_npy_" + std::to_string(::getpid()));
  fs::create_directories(d);
  fs::path p = d / name;
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return p;
}

}  // namespace

TEST_CASE("npy: float32 arrays of versions 1.0, 2.0 and 3.0 read the same", "[data][npy]") {
  for (const char* name : {"f4_2x3x4_v1.npy", "f4_2x3x4_v2.npy", "f4_2x3x4_v3.npy"}) {
    INFO(name);
    NpyArray a = read_npy(npy_path(name));
    CHECK(a.shape == std::vector<int64_t>{2, 3, 4});
    CHECK(a.dtype == "<f4");
    CHECK(a.numel() == 24);
    CHECK(a.item_size() == 4);
    CHECK(a.origin == npy_path(name));
    hpcnn::Tensor t = npy_to_tensor(a);
    REQUIRE(t.shape() == hpcnn::Shape{2, 3, 4});
    CHECK(t.layout() == hpcnn::Layout::plain);
    for (int i = 0; i < 24; ++i) CHECK(t.data()[i] == (static_cast<float>(i) - 11.5f) * 0.25f);
    // The in-memory parser agrees with the file reader.
    NpyArray m = parse_npy(file_bytes(npy_path(name)), name);
    CHECK(m.bytes == a.bytes);
    CHECK(m.shape == a.shape);
  }
}

TEST_CASE("npy: float64 becomes fp32 rounded to nearest", "[data][npy]") {
  NpyArray a = read_npy(npy_path("f8_3x2.npy"));
  CHECK(a.dtype == "<f8");
  CHECK(a.item_size() == 8);
  hpcnn::Tensor t = npy_to_tensor(a);
  REQUIRE(t.shape() == hpcnn::Shape{3, 2});
  const double expect[6] = {1.0, -2.5, 1e-40, 3.0e38, 3.14159265358979323846, -0.0};
  for (int i = 0; i < 6; ++i) CHECK(t.data()[i] == static_cast<float>(expect[i]));
  CHECK(std::signbit(t.data()[5]));
}

TEST_CASE("npy: 0-d and zero-size arrays", "[data][npy]") {
  NpyArray s = read_npy(npy_path("f4_scalar.npy"));
  CHECK(s.shape.empty());
  CHECK(s.numel() == 1);
  hpcnn::Tensor t = npy_to_tensor(s);
  CHECK(t.rank() == 0);
  CHECK(t.numel() == 1);
  CHECK(t.data()[0] == 7.5f);

  NpyArray z = read_npy(npy_path("f4_0x3.npy"));
  CHECK(z.shape == std::vector<int64_t>{0, 3});
  CHECK(z.bytes.empty());
  CHECK(npy_to_tensor(z).numel() == 0);
}

TEST_CASE("npy: integer labels", "[data][npy]") {
  CHECK(npy_to_labels(read_npy(npy_path("u1_labels.npy"))) == std::vector<int32_t>{0, 9, 3, 255});
  CHECK(npy_to_labels(read_npy(npy_path("i4_labels.npy"))) == std::vector<int32_t>{1, 0, 7, 2, 5});
  CHECK(npy_to_labels(read_npy(npy_path("i8_labels.npy"))) == std::vector<int32_t>{3, 1, 4, 1, 5, 9});
  const std::string big = error_of([] { npy_to_labels(read_npy(npy_path("i8_too_big.npy"))); }, ErrorKind::bad_input);
  CHECK_THAT(big, Catch::Contains("i8_too_big.npy") && Catch::Contains("label 1") && Catch::Contains("1099511627776"));
  // Floats are not labels; 2-D arrays are not a label vector; integers are not fp32 tensors.
  error_of([] { npy_to_labels(read_npy(npy_path("f4_2x3x4_v1.npy"))); }, ErrorKind::unsupported);
  const auto two_d = make_npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 1), }", f4_bytes({0, 0}));
  CHECK_THAT(error_of([&] { npy_to_labels(parse_npy(two_d, "l.npy")); }, ErrorKind::bad_input), Catch::Contains("1-D"));
  CHECK_THAT(error_of([] { npy_to_tensor(read_npy(npy_path("u1_labels.npy"))); }, ErrorKind::unsupported),
             Catch::Contains("u1_labels.npy") && Catch::Contains("|u1"));
}

TEST_CASE("npy: unsupported layouts and dtypes name the file and offset", "[data][npy]") {
  struct Case {
    const char* file;
    const char* says;
  };
  for (Case c : {Case{"f4_fortran.npy", "fortran_order"}, Case{"f4_big_endian.npy", "big-endian"}, Case{"f2_2.npy", "'<f2'"},
                 Case{"structured.npy", "structured"}}) {
    INFO(c.file);
    const std::string msg = error_of([&] { read_npy(npy_path(c.file)); }, ErrorKind::unsupported);
    CHECK_THAT(msg, Catch::Contains(c.file) && Catch::Contains("offset") && Catch::Contains(c.says));
  }
  // Other format versions.
  auto img = file_bytes(npy_path("f4_2x3x4_v1.npy"));
  img[6] = 4;
  CHECK_THAT(parse_error(img, ErrorKind::unsupported), Catch::Contains("version 4.0") && Catch::Contains("offset 6"));
  img[6] = 1;
  img[7] = 1;
  CHECK_THAT(parse_error(img, ErrorKind::unsupported), Catch::Contains("version 1.1"));
}

TEST_CASE("npy: missing, empty and non-npy files", "[data][npy]") {
  CHECK_THAT(error_of([] { read_npy(npy_path("no_such_file.npy")); }, ErrorKind::io), Catch::Contains("no_such_file.npy"));
  const fs::path empty = temp_file("empty.npy", {});
  CHECK_THAT(error_of([&] { read_npy(empty.string()); }, ErrorKind::bad_input),
             Catch::Contains("empty.npy") && Catch::Contains("empty file"));
  CHECK_THAT(error_of([] { read_npy(std::string(HPCNN_TEST_DATA_DIR) + "/alice29.txt"); }, ErrorKind::bad_input),
             Catch::Contains("alice29.txt") && Catch::Contains("magic"));
  fs::remove_all(empty.parent_path());
}

TEST_CASE("npy: every truncation of a valid file is bad_input", "[data][npy]") {
  for (const char* name : {"f4_2x3x4_v1.npy", "f4_2x3x4_v2.npy", "f8_3x2.npy"}) {
    const auto full = file_bytes(npy_path(name));
    for (size_t n = 0; n < full.size(); ++n) {
      INFO(name << " cut to " << n << " bytes");
      std::vector<unsigned char> cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
      const std::string msg = parse_error(cut, ErrorKind::bad_input);
      CHECK_THAT(msg, Catch::Contains("mem.npy") && Catch::Contains("offset"));
    }
  }
  // Through the file reader: cut inside the header and inside the data.
  const auto full = file_bytes(npy_path("f4_2x3x4_v1.npy"));
  for (size_t n : {size_t{9}, size_t{40}, full.size() - 1}) {
    const fs::path p = temp_file("cut.npy", std::vector<unsigned char>(full.begin(), full.begin() + static_cast<ptrdiff_t>(n)));
    const std::string msg = error_of([&] { read_npy(p.string()); }, ErrorKind::bad_input);
    CHECK_THAT(msg, Catch::Contains("cut.npy") && Catch::Contains("truncated"));
    fs::remove_all(p.parent_path());
  }
  const std::string data_msg = parse_error(std::vector<unsigned char>(full.begin(), full.end() - 4), ErrorKind::bad_input);
  CHECK_THAT(data_msg, Catch::Contains("needs 96 bytes") && Catch::Contains("has 92"));
}

TEST_CASE("npy: corrupted headers are bad_input", "[data][npy]") {
  const auto data6 = f4_bytes({1, 2, 3, 4, 5, 6});
  auto hdr = [](const std::string& shape) { return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }"; };
  // The helper itself makes valid files.
  CHECK(parse_npy(make_npy(1, hdr("(2, 3)"), data6), "ok").shape == std::vector<int64_t>{2, 3});
  CHECK(parse_npy(make_npy(2, hdr("(6,)"), data6), "ok").shape == std::vector<int64_t>{6});
  CHECK(parse_npy(make_npy(1, "{\"shape\":(3,2),\"descr\":\"<f4\",\"fortran_order\":False}", data6), "ok").shape ==
        std::vector<int64_t>{3, 2});

  struct Case {
    std::string dict;
    const char* says;
  };
  const Case cases[] = {
      {hdr("(2, -3)"), "non-negative"},
      {hdr("[2, 3]"), "expected '('"},
      {hdr("(2 3)"), "expected ',' or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3}", "expected ',' or ')'"},
      {hdr("(99999999999999999999,)"), "overflows"},
      {hdr("(4294967296, 4294967296)"), "overflows"},
      {hdr("(3037000500, 3037000500)"), "overflows"},
      {"{'descr': '<f4', 'shape': (2, 3), }", "lacks"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}", "unexpected key 'extra'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", "duplicate key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3)}", "True or False"},
      {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2, 3)}", "True or False"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3)}", "expected ':'"},
      {"{descr: '<f4', 'fortran_order': False, 'shape': (2, 3)}", "quoted string"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} junk", "after the header dict"},
      {"'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", "expected '{'"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}", "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x", "unterminated"},
      {"", "expected '{'"},
  };
  for (const Case& c : cases) {
    INFO(c.dict);
    CHECK_THAT(parse_error(make_npy(1, c.dict, data6), ErrorKind::bad_input),
               Catch::Contains(c.says) && Catch::Contains("mem.npy: offset "));
  }
  // Data size must match the shape exactly: fewer bytes, more bytes.
  CHECK_THAT(parse_error(make_npy(1, hdr("(2, 4)"), data6), ErrorKind::bad_input), Catch::Contains("truncated data"));
  CHECK_THAT(parse_error(make_npy(1, hdr("(5,)"), data6), ErrorKind::bad_input), Catch::Contains("4 unexpected bytes"));
  // A huge declared shape fails on the size check without allocating.
  CHECK_THAT(parse_error(make_npy(3, hdr("(1000000000, 1000000)"), data6), ErrorKind::bad_input),
             Catch::Contains("truncated data"));
  // A header length beyond the file, and an absurd one.
  auto img = make_npy(2, hdr("(2, 3)"), data6);
  img[9] = 0xff;  // header length gets bits 8..15 set: past the end of the file
  CHECK_THAT(parse_error(img, ErrorKind::bad_input), Catch::Contains("truncated header"));
  img[11] = 0xff;
  CHECK_THAT(parse_error(img, ErrorKind::bad_input), Catch::Contains("implausibly large"));
  // Bad magic.
  img = make_npy(1, hdr("(2, 3)"), data6);
  img[1] = 'n';
  CHECK_THAT(parse_error(img, ErrorKind::bad_input), Catch::Contains("magic") && Catch::Contains("offset 0"));
}

TEST_CASE("npy: any single corrupted header byte fails cleanly or still parses", "[data][npy]") {
  const auto full = file_bytes(npy_path("f4_2x3x4_v1.npy"));
  size_t failures = 0;
  for (size_t i = 0; i < 128; ++i) {
    for (unsigned char v : {0x00, 0x20, 0x27, 0x28, 0x29, 0x2c, 0x31, 0x7d, 0x80, 0xff}) {
      auto img = full;
      if (img[i] == v) continue;
      img[i] = v;
      try {
        NpyArray a = parse_npy(img, "flip");
        CHECK(a.bytes.size() == static_cast<size_t>(a.numel()) * a.item_size());
      } catch (const Error&) {
        ++failures;
      }
    }
  }
  CHECK(failures > 0);
}
