// Helpers of the data-layer tests: a temporary folder and writers for small IDX, CIFAR-10, NPY,
// gzip and huffgpu files built in the test.
#pragma once

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "huffman/stream.h"

namespace data_test {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

// A fresh folder under the system temp folder, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "hpcnn_data_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

inline void write_file(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  REQUIRE(out);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  REQUIRE(out);
}

inline Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

// IDX images file (magic 0x00000803) holding `pixels` (n * rows * cols bytes).
inline Bytes idx_images(uint32_t n, uint32_t rows, uint32_t cols, const Bytes& pixels) {
  Bytes b = {0, 0, 8, 3};
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

// IDX labels file (magic 0x00000801).
inline Bytes idx_labels(const Bytes& labels) {
  Bytes b = {0, 0, 8, 1};
  put_be32(b, static_cast<uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

// An .npy v1.0 image with the header dict `dict` and `data`.
inline Bytes npy_file(const std::string& dict, const Bytes& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  const uint8_t pre[10] = {
      0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<uint8_t>(header.size() & 0xff), static_cast<uint8_t>(header.size() >> 8)};
  Bytes out(10 + header.size() + data.size());
  std::memcpy(out.data(), pre, 10);
  std::memcpy(out.data() + 10, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 10 + header.size(), data.data(), data.size());
  return out;
}

template <class T>
Bytes raw_bytes(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// gzip (one member) of `data`, through zlib's gz* interface.
inline void write_gzip(const std::string& path, const Bytes& data) {
  gzFile f = gzopen(path.c_str(), "wb6");
  REQUIRE(f != nullptr);
  if (!data.empty()) REQUIRE(gzwrite(f, data.data(), static_cast<unsigned>(data.size())) == static_cast<int>(data.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

// huffgpu-encode of file `in` to file `out` with the CPU codec (small chunks: several per file).
inline void write_huffgpu(const std::string& in, const std::string& out, uint32_t chunk_size = 1u << 16) {
  const int fd = ::open(in.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  Bytes enc;
  hpcnn::huffman::FileHeader h;
  h.chunk_size = chunk_size;
  hpcnn::huffman::encode_stream(
      fd, [&](const uint8_t* d, size_t n) { enc.insert(enc.end(), d, d + n); }, h, 2);
  ::close(fd);
  write_file(out, enc);
}

// Runs fn, which must throw hpcnn::Error of `kind`; returns the message.
template <class Fn>
std::string error_of(Fn&& fn, hpcnn::ErrorKind kind) {
  try {
    fn();
  } catch (const hpcnn::Error& e) {
    CHECK(static_cast<int>(e.kind()) == static_cast<int>(kind));
    return e.what();
  }
  FAIL("no hpcnn::Error thrown");
  return {};
}

}  // namespace data_test
