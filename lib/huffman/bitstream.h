// hpcnn huffman: the bit-level rules shared by every encoder and decoder, CPU and CUDA.
//
// Bitstream (Yamamoto, Nakano et al., ICPP 2020, Sec. 3 "wordwise memory access"): codewords are
// packed most-significant-bit first into 32-bit words; bit b of the stream is bit (31 - b % 32)
// of word b / 32. Words are stored little-endian in the file.
// Gap array (Sec. 4): the stream is cut into segments of S bits (S = 128 or 256); entry k is the
// offset, in bits from k*S, of the first codeword boundary at or after k*S (a boundary is a
// codeword start or the end of the stream). With codes of at most 16 bits the offset is 0..15,
// so an entry takes 4 bits; entry k is the low nibble of byte k/2 for even k, the high nibble
// for odd k.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HPCNN_HD __host__ __device__ __forceinline__
#else
#define HPCNN_HD inline
#endif

namespace hpcnn::huffman {

inline constexpr int kMaxCodeLength = 16;

// Number of segments of a stream of `bits` bits: ceil(bits / S); 0 for an empty stream.
HPCNN_HD uint64_t segment_count(uint64_t bits, uint32_t segment_bits) { return (bits + segment_bits - 1) / segment_bits; }

// Gap entry of segment k for a codeword boundary at `boundary` (the first one >= k*S).
HPCNN_HD uint32_t gap_entry(uint64_t boundary, uint64_t k, uint32_t segment_bits) {
  return static_cast<uint32_t>(boundary - k * segment_bits);
}

HPCNN_HD uint32_t read_gap(const uint8_t* gaps, uint64_t k) { return (gaps[k >> 1] >> ((k & 1) * 4)) & 0xF; }

// 32 bits of the stream starting at bit `pos` (MSB first), reading words w[pos/32] and the next
// one; `nwords` bounds the reads (bits past the end read as 0).
HPCNN_HD uint32_t peek32(const uint32_t* words, uint64_t nwords, uint64_t pos) {
  const uint64_t i = pos >> 5;
  const uint32_t sh = static_cast<uint32_t>(pos & 31);
  const uint64_t hi = i < nwords ? words[i] : 0;
  const uint64_t lo = i + 1 < nwords ? words[i + 1] : 0;
  return static_cast<uint32_t>(((hi << 32 | lo) << sh) >> 32);
}

}  // namespace hpcnn::huffman
