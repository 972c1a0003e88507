// hpcnn huffman: the encoder's packing loop for x86-64 CPUs with AVX-512 VBMI (Intel Ice Lake
// and newer, AMD Zen 4 and newer), 64 input bytes at a time.
//
// For a code block whose codewords have at most 12 bits (the default limit), pack_quads() looks
// up 64 codewords at once with vpermi2b in a 256-entry table of code << 4 | length held in eight
// vector registers (no memory lookups), merges them in fours (at most 48 bits each) with two
// levels of variable shifts, and finds the gap-array entries from a prefix sum of the four-codeword
// groups' lengths; the scalar side only shifts each group into its 64-bit accumulator and stores
// 8 bytes: two groups at once (an octet) where all eight octets of the 64 bytes have at most 57
// bits (text, mostly; 7 pending bits + 57 fill the accumulator), else the sixteen quads one by
// one (half the flushes on text: encoding 3-8% faster on an Intel Xeon, 2026-12-04). The vector work of one 64-byte group is
// interleaved with the scalar flushes of the group before, so the two overlap. The bits and entries are the scalar packers' (pair
// table, single lookups): which path runs never changes the output (tests/huffman/test_codec.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace hpcnn::huffman {

// Byte tables of one code block: entry s = code << 4 | length of byte value s (0 where s is
// absent), low bytes in lo, high bytes in hi.
struct alignas(64) QuadTables {
  uint8_t lo[256];
  uint8_t hi[256];
};

// True when this CPU runs pack_quads() (AVX-512 F, BW and VBMI) and it has not been switched off
// with set_quad_pack_enabled(false).
bool quad_pack_available();

// Tests compare both paths on one machine: false makes quad_pack_available() false.
void set_quad_pack_enabled(bool enabled);

// enc[s] = code | length << 24 (lengths at most 12; the encoder's BlockPlan::enc).
void make_quad_tables(const std::array<uint32_t, 256>& enc, QuadTables& t);

// The packer's position in the big-endian byte stream: `nacc` (< 8) bits pending in the low
// bits of `acc`, the next byte at `o`.
struct QuadStream {
  uint64_t acc = 0;
  uint32_t nacc = 0;
  uint8_t* o = nullptr;
};

// Packs the codewords of in[0..n) (n a positive multiple of 64, at most 2048, else a usage
// error) into the stream, four at a
// time (at most 48 bits per 8-byte store: the caller leaves 8 bytes of room past the last byte
// they complete). With `gaps` (else null): the codewords start at bit `offset` (< S =
// 2^segment_log2) of a segment, and every segment boundary B = m*S that a codeword crosses or
// ends at, B in (start, end], gets its gap-array entry end - B in gaps[m] (FORMAT.md, the gap
// array; m counted from that segment); returns the bits packed (0 without gaps).
// Only when quad_pack_available().
uint64_t pack_quads(const uint8_t* in, size_t n, const QuadTables& t, QuadStream& st, uint8_t* gaps = nullptr,
                    uint32_t offset = 0, uint32_t segment_log2 = 8);

}  // namespace hpcnn::huffman
