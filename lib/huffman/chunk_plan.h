// hpcnn huffman: what every encoder (CPU and CUDA) decides and writes around the bitstream of
// a chunk, so that both produce the same bytes: the mode (Huffman, raw or single symbol), the
// code, the exact bit length and payload layout from the histogram, and the chunk's header,
// code table and metadata checksum. Encoders only fill in the bitstream words and gap array.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "huffman/codebook.h"
#include "huffman/format.h"

namespace hpcnn::huffman {

struct ChunkPlan {
  ChunkMode mode = ChunkMode::huffman;
  uint8_t symbol = 0;                // single_symbol: the byte
  CodeLengths lengths{};
  std::array<uint32_t, 256> enc{};   // per symbol: canonical codeword | length << 24
  uint64_t total_bits = 0;
  PayloadLayout layout;
};

// Decides the chunk's mode and code from the histogram of its n bytes.
ChunkPlan plan_chunk(const Histogram& hist, size_t n, const FileHeader& fh);

// Single-symbol and raw chunks, complete.
void write_single_symbol_chunk(const ChunkPlan& plan, size_t n, uint64_t checksum, std::vector<uint8_t>& out);
void write_raw_chunk(const uint8_t* in, size_t n, uint64_t checksum, std::vector<uint8_t>& out);

// Huffman chunks: begin sizes `out`, zeroes everything before the words and writes the code
// table; the encoder then fills the gap array and the words; finish writes the header with the
// metadata checksum.
void begin_huffman_chunk(const ChunkPlan& plan, std::vector<uint8_t>& out);
void finish_huffman_chunk(const ChunkPlan& plan, size_t n, uint64_t checksum, std::vector<uint8_t>& out);

}  // namespace hpcnn::huffman
