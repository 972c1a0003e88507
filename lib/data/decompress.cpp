#include "data/decompress.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>

#include "core/error.h"
#include "core/threads.h"
#include "data/file_io.h"
#include "huffman/format.h"
#include "huffman/stream.h"

namespace hpcnn::data {

namespace {

using Reader = std::function<size_t(uint8_t* buf, size_t n)>;  // fewer than n bytes only at the end

[[noreturn]] void bad(const std::string& origin, uint64_t offset, const std::string& what) {
  throw_error(ErrorKind::bad_input, origin + ": offset " + std::to_string(offset) + ": " + what);
}

// Inflates a gzip stream (RFC 1952, one or more members) read through `read`.
std::vector<uint8_t> inflate_gzip(const Reader& read, const std::string& origin) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw_error(ErrorKind::io, origin + ": cannot initialise zlib");
  struct Guard {
    z_stream* z;
    ~Guard() { inflateEnd(z); }
  } guard{&zs};

  std::vector<uint8_t> in(1 << 20), out;
  uint64_t fed = 0;  // compressed bytes handed to zlib so far
  bool eof = false;
  auto refill = [&] {
    if (zs.avail_in != 0 || eof) return;
    const size_t n = read(in.data(), in.size());
    eof = n < in.size();
    zs.next_in = in.data();
    zs.avail_in = static_cast<uInt>(n);
    fed += n;
  };
  auto consumed = [&] { return fed - zs.avail_in; };

  size_t produced = 0;
  for (;;) {
    refill();
    if (out.size() - produced < (1u << 20)) out.resize(std::max<size_t>(out.size() * 2, produced + (1u << 20)));
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, 1u << 30));
    const uInt before = zs.avail_out;
    const int rc = inflate(&zs, Z_NO_FLUSH);
    produced += before - zs.avail_out;
    if (rc == Z_STREAM_END) {
      // Another member may follow (gzip -d reads concatenated members as one stream).
      refill();
      if (zs.avail_in == 0) break;
      if (zs.next_in[0] != 0x1f) bad(origin, consumed(), "unexpected bytes after the gzip stream (not another gzip member)");
      if (inflateReset(&zs) != Z_OK) throw_error(ErrorKind::io, origin + ": zlib inflateReset failed");
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR) {
      if (zs.avail_in == 0 && eof)
        bad(origin, consumed(), "truncated gzip stream (the compressed data ends before the end of the stream)");
      continue;  // needs more output space or input; the loop provides both
    }
    if (rc == Z_MEM_ERROR) throw_error(ErrorKind::io, origin + ": zlib ran out of memory");
    bad(origin, consumed(), std::string("corrupt gzip data: ") + (zs.msg ? zs.msg : "zlib error " + std::to_string(rc)));
  }
  out.resize(produced);
  out.shrink_to_fit();
  return out;
}

std::string strip_suffix(const std::string& name, Compression c) {
  const std::string suffix = c == Compression::gzip ? ".gz" : ".huf";  // huffgpu-encode's extension
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return name.substr(0, name.size() - suffix.size());
  return name;
}

}  // namespace

Compression detect_compression(const uint8_t* p, size_t n) {
  if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b) return Compression::gzip;
  if (n >= sizeof(huffman::kMagic) && std::memcmp(p, huffman::kMagic, sizeof(huffman::kMagic)) == 0) return Compression::huffgpu;
  return Compression::none;
}

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::none:
      return "none";
    case Compression::gzip:
      return "gzip";
    case Compression::huffgpu:
      return "huffgpu";
  }
  return "?";
}

std::vector<uint8_t> gunzip(std::span<const uint8_t> data, const std::string& origin) {
  size_t pos = 0;
  return inflate_gzip(
      [&](uint8_t* buf, size_t n) {
        const size_t k = std::min(n, data.size() - pos);
        std::memcpy(buf, data.data() + pos, k);
        pos += k;
        return k;
      },
      origin);
}

namespace {
std::atomic<uint64_t> g_decoded{0};
}  // namespace

uint64_t compressed_files_decoded() { return g_decoded.load(std::memory_order_relaxed); }

FileBytes read_file_decoded(const std::string& path, int threads) {
  FileBytes fb;
  fb.path = path;
  fb.origin = path;
  fb.name = path;
  const File file = File::open(path);
  uint8_t head[8] = {};
  const size_t head_n = file.pread_some(head, sizeof head, 0);
  const Compression outer = detect_compression(head, head_n);
  if (outer == Compression::none) {
    fb.bytes = file.read_all();
    return fb;
  }
  fb.layers.push_back(outer);
  fb.name = strip_suffix(fb.name, outer);
  g_decoded.fetch_add(1, std::memory_order_relaxed);
  if (outer == Compression::gzip) {
    uint64_t pos = 0;
    fb.bytes = inflate_gzip(
        [&](uint8_t* buf, size_t n) {
          const size_t k = file.pread_some(buf, n, pos);
          pos += k;
          return k;
        },
        path);
    fb.origin = path + " (after gzip)";
  } else {
    if (::lseek(file.fd(), 0, SEEK_SET) != 0) throw_error(ErrorKind::io, path + ": cannot seek: " + std::strerror(errno));
    try {
      huffman::decode_stream(
          file.fd(), [&](const uint8_t* d, size_t n) { fb.bytes.insert(fb.bytes.end(), d, d + n); },
          threads > 0 ? threads : default_thread_count());
    } catch (const Error& e) {
      throw Error(e.kind(), path + ": huffgpu stream: " + e.what());
    }
    fb.origin = path + " (after huffgpu)";
  }
  // Inner layers (in memory).
  for (;;) {
    const Compression inner = detect_compression(fb.bytes.data(), fb.bytes.size());
    if (inner == Compression::none) break;
    if (inner == Compression::huffgpu)
      throw_error(ErrorKind::unsupported, fb.origin + ": offset 0: a huffgpu stream inside " +
                                              compression_name(fb.layers.back()) +
                                              " is not supported (decode it with huffgpu-decode first)");
    std::vector<uint8_t> inflated = gunzip(fb.bytes, fb.origin);
    fb.bytes = std::move(inflated);
    fb.layers.push_back(inner);
    fb.name = strip_suffix(fb.name, inner);
    fb.origin += " (after gzip)";
  }
  return fb;
}

}  // namespace hpcnn::data
