// hpcnn huffman: where a chunk's code blocks start (format version 2, FORMAT.md "Code blocks").
//
// A chunk is cut into units of kBlockUnit bytes (16 KiB; the last unit may be shorter) and the
// encoder decides, from the units' byte histograms alone, which runs of units share one Huffman
// code. Cost of a block = its estimated code bits + its table: the estimate is max(order-0
// entropy, one bit per byte), the table 8 * (32 + ceil(symbols / 2)) + 96 bits (bitmap,
// nibbles, block-table entry) + kBlockPenaltyBits. Bottom-up greedy merging (as in
// agglomerative clustering): starting from single units, the adjacent pair whose merge lowers
// the total cost most is merged, until no merge lowers it (a heap over the pairs, O(U log U)
// cost evaluations for U units; a merged block's cost is the one computed when its pair was
// pushed). The estimates are integers in units of 2^-24 bits (sums of c log2 c from a fixed table
// and formula in integer arithmetic, eight counts at a time with AVX-512), so every machine
// makes the same decisions.
// Deterministic: depends only on the histograms, never on threads, so
// the CPU and CUDA encoders, which share it, write the same blocks. Every block but the chunk's
// last holds at least kBlockUnit bytes (the minimum block size of FORMAT.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "huffman/codebook.h"
#include "huffman/format.h"

namespace hpcnn::huffman {

inline constexpr size_t kBlockUnit = kMinBlockSize;

// A block must save this much beyond its own table to be kept: every block costs the decoder a
// table build (about 13 us on the reference machine, the time of decoding some 20 KB), and the
// entropy estimate is a little optimistic about what a real code saves.
inline constexpr uint64_t kBlockPenaltyBits = 1024;

// Number of units of a chunk of n bytes: ceil(n / kBlockUnit).
inline size_t block_units(size_t n) { return (n + kBlockUnit - 1) / kBlockUnit; }

// `units[u]` is the histogram of bytes [u * kBlockUnit, min(n, (u + 1) * kBlockUnit)).
// Returns the first unit of every block, in increasing order; the first is 0. The counts of all
// units must add up to below 2^32 (a chunk holds at most 1 GiB), else a usage error.
std::vector<uint32_t> split_blocks(std::span<const Histogram> units);
// The same, given `total` (the sum of the units), and with `block_hists` (when not null): the
// histogram of every block.
std::vector<uint32_t> split_blocks(std::span<const Histogram> units, const Histogram& total, std::vector<Histogram>* block_hists);

// The splitter's estimated cost of a block with histogram h (counts adding up to below 2^32,
// else a usage error), in units of 2^-24 bits: max(order-0 entropy, one bit per byte) + table +
// penalty (0 for an empty histogram).
int64_t block_cost_q24(const Histogram& h);

// Tests compare both paths on one machine: false makes the splitter's estimates use the scalar
// path where the CPU has AVX-512 (F and CD).
void set_split_vector_enabled(bool enabled);

// Bits of the compact code-length table and block-table entry of a block with these lengths.
uint64_t block_table_bits(const CodeLengths& lengths);

// Code lengths for a block: the length-limited Huffman code of its histogram; a block of one
// distinct byte value gets a one-bit code for it and for the next byte value (255: 254), since
// a code needs two symbols.
CodeLengths block_code_lengths(const Histogram& hist, int code_limit);

}  // namespace hpcnn::huffman
