// hpcnn huffman: what every encoder (CPU and CUDA) decides and writes around the bitstream of
// a chunk, so that both produce the same bytes: the mode (Huffman, raw or single symbol), the
// code blocks (block_split.h) and their codes, the exact bit lengths and payload layout from the
// 16 KiB units' histograms, and the chunk's header, block table, code tables and metadata
// checksum. Encoders only fill in the bitstream words and gap array. Also the decoders' parser of
// the same tables (read_code_blocks), for both format versions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "huffman/codebook.h"
#include "huffman/format.h"

namespace hpcnn::huffman {

// One code block: input bytes [begin, begin + n) of the chunk, coded with `lengths` into bits
// [bit_begin, bit_begin + bits) of the chunk's bitstream.
struct BlockPlan {
  size_t begin = 0, n = 0;
  size_t first_unit = 0, end_unit = 0;  // its 16 KiB units
  CodeLengths lengths{};
  std::array<uint32_t, 256> enc{};  // per symbol: canonical codeword | length << 24
  uint64_t bit_begin = 0, bits = 0;
  int max_length = 0;
  int symbols = 0;  // distinct byte values in the code
};

struct ChunkPlan {
  ChunkMode mode = ChunkMode::huffman;
  uint8_t symbol = 0;  // single_symbol: the byte
  std::vector<BlockPlan> blocks;
  uint64_t total_bits = 0;
  PayloadLayout layout;
};

// Decides the chunk's mode, blocks and codes from the histograms of its kBlockUnit-byte units
// (units[u] counts bytes [u * 16 KiB, min(n, (u + 1) * 16 KiB))) of its n bytes.
ChunkPlan plan_chunk(std::span<const Histogram> units, size_t n, const FileHeader& fh);

// Single-symbol and raw chunks, complete.
void write_single_symbol_chunk(const ChunkPlan& plan, size_t n, uint64_t checksum, std::vector<uint8_t>& out);
void write_raw_chunk(const uint8_t* in, size_t n, uint64_t checksum, std::vector<uint8_t>& out);

// Huffman chunks: begin sizes `out`, zeroes everything before the words and writes the block
// table and code tables; the encoder then fills the gap array and the words; finish writes the
// header with the metadata checksum.
void begin_huffman_chunk(const ChunkPlan& plan, std::vector<uint8_t>& out);
void finish_huffman_chunk(const ChunkPlan& plan, size_t n, uint64_t checksum, std::vector<uint8_t>& out);

// A decoder's view of one code block.
struct CodeBlock {
  uint64_t out_begin = 0;  // first output byte of the block within the chunk
  uint32_t length = 0;     // output bytes
  uint64_t bit_begin = 0, bits = 0;
  CodeLengths lengths{};
  int min_length = 0, max_length = 0;
};

// Parses the tables of a Huffman chunk (`payload` = the bytes after the chunk header, `avail` of
// them): version 1, one code-length table for the whole chunk; version 2, the block table and one
// code-length table per block. Checks each table, that the lengths add up to the chunk's original
// length and the bits to its bit length, that every block but the last holds at least
// kMinBlockSize bytes and that each block's bits are possible for its length. Sets *table_size to
// the bytes the tables take. Errors: ErrorKind::bad_input naming the chunk, block and offset.
std::vector<CodeBlock> read_code_blocks(const ChunkHeader& h, const uint8_t* payload, size_t avail, const FileHeader& fh,
                                        size_t* table_size, uint64_t index, uint64_t offset);

}  // namespace hpcnn::huffman
