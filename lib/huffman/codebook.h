// hpcnn huffman: code construction and the code tables shared by encoders and decoders.
//
// Codes are canonical Huffman codes (codewords assigned in order of (length, symbol)) whose
// lengths are optimal under a limit L <= 16 bits: Huffman's code when it is no deeper than L,
// else package-merge (Larmore & Hirschberg 1990). The compact code-length table stored per chunk is a 32-byte bitmap of the
// symbols that occur followed by one nibble per occurring symbol holding (length - 1), in symbol order. Decoders use a two-level
// lookup table (Yamamoto, Nakano et al., ICPP 2020, "compact codebooks"): a root table on the first K bits of the code and small
// second-level tables for the longer codewords under each K-bit prefix.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hpcnn::huffman {

using Histogram = std::array<uint64_t, 256>;
using CodeLengths = std::array<uint8_t, 256>;  // 0: symbol absent

// Optimal code lengths under `limit` (8..16) for the symbols with non-zero counts; at least two
// such symbols. Complete code: sum of 2^-len == 1.
CodeLengths limited_code_lengths(const Histogram& counts, int limit);

// Canonical codewords (right-aligned in the low `length` bits).
std::array<uint32_t, 256> canonical_codes(const CodeLengths& lengths);

// Serialized size and bytes of the compact code-length table.
size_t code_table_size(const CodeLengths& lengths);
void write_code_table(const CodeLengths& lengths, uint8_t* out);
// Parses a table at `in` (at most `avail` bytes). Throws ErrorKind::bad_input when it is
// truncated, has fewer than two symbols, a length above `limit`, or is not a complete code;
// `where` names the chunk and offset in the message.
CodeLengths read_code_table(const uint8_t* in, size_t avail, int limit, size_t* consumed, const std::string& where);

// Two-level decoding table. Entry: up to three symbols in bits 0-7, 8-15 and 16-23, the bits
// they consume in bits 24-28 (bit 29 is 0) and their count (1..3) in bits 30-31. A root entry
// with count 0 points to a second-level table instead: index of its first entry in bits 5-29,
// its index width in bits 0-4 (indexed by the bits that follow the K root bits). With `multi`,
// a root entry whose K bits hold two or three whole codewords decodes them all at once.
// (x86 shifts use only the low 6 bits of a count, so `v << (e >> 24 & 63)` is one instruction.)
struct DecodeTable {
  int root_bits = 0;
  int max_length = 0;
  int min_length = 0;
  std::vector<uint32_t> root;  // 2^root_bits entries
  std::vector<uint32_t> sub;   // second-level tables
  CodeLengths lengths{};       // the code the table decodes
};

// root_bits: K, 1..16 (else ErrorKind::usage).
DecodeTable build_decode_table(const CodeLengths& lengths, int root_bits = 12, bool multi = false);
// The same into `t`, reusing its memory (a decoder that builds one table per code block).
void build_decode_table(const CodeLengths& lengths, int root_bits, bool multi, DecodeTable& t);

// Field accessors of a table entry.
inline uint32_t entry_bits(uint32_t e) { return (e >> 24) & 31; }
inline uint32_t entry_count(uint32_t e) { return e >> 30; }
inline bool entry_is_pointer(uint32_t e) { return (e >> 30) == 0; }
inline uint32_t pointer_index(uint32_t e) { return e >> 5; }

}  // namespace hpcnn::huffman
