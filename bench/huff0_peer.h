// huff0 (zstd's Huffman coder) as a benchmark peer: blocks of 128 KiB, each coded on its own with
// HUF_compress4X_repeat (a fresh table, tableLog 11, four streams, as zstd codes literals) and
// decoded with HUF_decompress4X_hufOnly_wksp; 4 header bytes per block (2-bit mode: raw, RLE or
// Huffman; 30-bit payload size) are counted. A block huff0 declines is stored raw, a one-symbol
// block as RLE. As ../shared/tools/peers/huffpeer.c does.
//
// huff0 is zstd's private API: Debian's libzstd.a (libzstd-dev) exports the HUF_* functions but no
// header declares them, so the prototypes below are those of zstd's lib/common/huf.h at tag v1.5.4
// (the same in 1.5.5 and 1.5.6); 1.5.4 replaced the bool arguments of 1.5.2 with one `int flags`,
// so other versions are refused at compile time. Benchmark only: linked from the static library.
#pragma once

#include <zstd.h>  // ZSTD_VERSION_NUMBER

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#if ZSTD_VERSION_NUMBER < 10504 || ZSTD_VERSION_NUMBER > 10506
#error "the HUF_* prototypes below match zstd 1.5.4 to 1.5.6 only"
#endif

extern "C" {
typedef unsigned HUF_DTable;
typedef size_t HUF_CElt;
typedef enum { HUF_repeat_none, HUF_repeat_check, HUF_repeat_valid } HUF_repeat;
size_t HUF_compressBound(size_t size);
unsigned HUF_isError(size_t code);
const char* HUF_getErrorName(size_t code);
size_t HUF_compress4X_repeat(void* dst, size_t dstSize, const void* src, size_t srcSize, unsigned maxSymbolValue,
                             unsigned tableLog, void* workSpace, size_t wkspSize, HUF_CElt* hufTable, HUF_repeat* repeat,
                             int flags);
size_t HUF_decompress4X_hufOnly_wksp(HUF_DTable* dctx, void* dst, size_t dstSize, const void* cSrc, size_t cSrcSize,
                                     void* workSpace, size_t wkspSize, int flags);
}

namespace huff0_peer {

constexpr size_t kBlock = 128 * 1024;  // HUF_BLOCKSIZE_MAX
constexpr unsigned kTableLog = 11;     // HUF_TABLELOG_DEFAULT
constexpr unsigned kTableLogMax = 12;  // HUF_TABLELOG_MAX
constexpr size_t kCWorkspace = (8 << 10) + 512;
constexpr size_t kDWorkspace = (2 << 10) + (1 << 9);
constexpr int kFlagBmi2 = 1;  // HUF_flags_bmi2 (libzstd.a is built with DYNAMIC_BMI2)

struct Codec {
  std::vector<uint64_t> cwork = std::vector<uint64_t>(kCWorkspace / 8);
  std::vector<uint32_t> dwork = std::vector<uint32_t>(kDWorkspace / 4);
  std::vector<HUF_DTable> dtable = std::vector<HUF_DTable>(1 + (1u << kTableLogMax));
  int flags = __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") ? kFlagBmi2 : 0;

  // Encodes `in` into `out` (resized to its bound first); returns the encoded size.
  size_t encode(const std::vector<uint8_t>& in, std::vector<uint8_t>& out) {
    out.resize((in.size() / kBlock + 1) * (4 + HUF_compressBound(kBlock)));
    uint8_t* op = out.data();
    for (size_t pos = 0; pos < in.size(); pos += kBlock) {
      const size_t n = std::min(kBlock, in.size() - pos);
      uint8_t* body = op + 4;
      size_t r = HUF_compress4X_repeat(body, HUF_compressBound(kBlock), in.data() + pos, n, 255, kTableLog, cwork.data(),
                                       kCWorkspace, nullptr, nullptr, flags);
      if (HUF_isError(r)) throw std::runtime_error(HUF_getErrorName(r));
      uint32_t mode = 2;
      if (r == 0 || r >= n) {
        std::memcpy(body, in.data() + pos, n);
        r = n;
        mode = 0;
      } else if (r == 1) {
        mode = 1;
      }
      const uint32_t h = mode << 30 | static_cast<uint32_t>(r);
      std::memcpy(op, &h, 4);
      op = body + r;
    }
    return static_cast<size_t>(op - out.data());
  }

  // Decodes `size` bytes of `in` into out[0 .. out.size()).
  void decode(const std::vector<uint8_t>& in, size_t size, std::vector<uint8_t>& out) {
    const uint8_t* ip = in.data();
    const uint8_t* end = in.data() + size;
    for (size_t pos = 0; pos < out.size(); pos += kBlock) {
      const size_t n = std::min(kBlock, out.size() - pos);
      uint32_t h;
      std::memcpy(&h, ip, 4);
      ip += 4;
      const size_t r = h & 0x3FFFFFFFu;
      if (ip + r > end) throw std::runtime_error("huff0 peer: truncated");
      if (h >> 30 == 0)
        std::memcpy(out.data() + pos, ip, n);
      else if (h >> 30 == 1)
        std::memset(out.data() + pos, ip[0], n);
      else {
        dtable[0] = kTableLogMax * 0x01000001u;
        const size_t e =
            HUF_decompress4X_hufOnly_wksp(dtable.data(), out.data() + pos, n, ip, r, dwork.data(), kDWorkspace, flags);
        if (HUF_isError(e) || e != n) throw std::runtime_error("huff0 peer: decode failed");
      }
      ip += r;
    }
  }
};

}  // namespace huff0_peer
