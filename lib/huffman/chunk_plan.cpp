#include "huffman/chunk_plan.h"

#include <cstring>

namespace hpcnn::huffman {

ChunkPlan plan_chunk(const Histogram& hist, size_t n, const FileHeader& fh) {
  ChunkPlan p;
  int nsym = 0;
  for (int s = 0; s < 256; ++s)
    if (hist[s]) ++nsym, p.symbol = static_cast<uint8_t>(s);
  if (nsym == 1) {
    p.mode = ChunkMode::single_symbol;
    return p;
  }
  p.lengths = limited_code_lengths(hist, fh.code_limit);
  const auto codes = canonical_codes(p.lengths);
  for (int s = 0; s < 256; ++s) {
    p.enc[s] = codes[s] | static_cast<uint32_t>(p.lengths[s]) << 24;
    p.total_bits += hist[s] * p.lengths[s];
  }
  p.layout = huffman_layout(code_table_size(p.lengths), p.total_bits, fh);
  p.mode = p.layout.payload_length >= n ? ChunkMode::raw : ChunkMode::huffman;
  return p;
}

void write_single_symbol_chunk(const ChunkPlan& plan, size_t n, uint64_t checksum, std::vector<uint8_t>& out) {
  ChunkHeader ch;
  ch.mode = ChunkMode::single_symbol;
  ch.original_length = static_cast<uint32_t>(n);
  ch.payload_length = 1;
  ch.checksum = checksum;
  out.assign(kChunkHeaderSize + 1, 0);
  out[kChunkHeaderSize] = plan.symbol;
  write_chunk_header(ch, out.data());
}

void write_raw_chunk(const uint8_t* in, size_t n, uint64_t checksum, std::vector<uint8_t>& out) {
  ChunkHeader ch;
  ch.mode = ChunkMode::raw;
  ch.original_length = static_cast<uint32_t>(n);
  ch.payload_length = static_cast<uint32_t>(n);
  ch.checksum = checksum;
  out.resize(kChunkHeaderSize + n);
  std::memcpy(out.data() + kChunkHeaderSize, in, n);
  write_chunk_header(ch, out.data());
}

void begin_huffman_chunk(const ChunkPlan& plan, std::vector<uint8_t>& out) {
  // Every word of the bitstream is written by the encoder; zero only what comes before.
  out.resize(kChunkHeaderSize + plan.layout.payload_length);
  std::memset(out.data(), 0, plan.layout.words_offset);
  write_code_table(plan.lengths, out.data() + plan.layout.table_offset);
}

void finish_huffman_chunk(const ChunkPlan& plan, size_t n, uint64_t checksum, std::vector<uint8_t>& out) {
  ChunkHeader ch;
  ch.mode = ChunkMode::huffman;
  ch.original_length = static_cast<uint32_t>(n);
  ch.payload_length = static_cast<uint32_t>(plan.layout.payload_length);
  ch.bit_length = plan.total_bits;
  ch.checksum = checksum;
  ch.meta_checksum = checksum32(out.data() + kChunkHeaderSize, plan.layout.words_offset - kChunkHeaderSize);
  write_chunk_header(ch, out.data());
}

}  // namespace hpcnn::huffman
