#include "huffman/chunk_plan.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "huffman/bitstream.h"
#include "huffman/block_split.h"

namespace hpcnn::huffman {
namespace {

template <class T>
void put_le(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
template <class T>
T get_le(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(p[i]) << (8 * i);
  return v;
}

}  // namespace

ChunkPlan plan_chunk(std::span<const Histogram> units, size_t n, const FileHeader& fh) {
  if (units.size() != block_units(n)) throw_error(ErrorKind::usage, "plan_chunk: one histogram per 16 KiB unit expected");
  ChunkPlan p;
  Histogram total{};
  for (const auto& u : units)
    for (int s = 0; s < 256; ++s) total[s] += u[s];
  int nsym = 0;
  for (int s = 0; s < 256; ++s)
    if (total[s]) ++nsym, p.symbol = static_cast<uint8_t>(s);
  if (nsym == 1) {
    p.mode = ChunkMode::single_symbol;
    return p;
  }
  std::vector<Histogram> block_hists;
  const std::vector<uint32_t> starts = split_blocks(units, total, &block_hists);
  size_t table_size = kBlockEntrySize * starts.size();
  for (size_t b = 0; b < starts.size(); ++b) {
    BlockPlan bp;
    bp.first_unit = starts[b];
    bp.end_unit = b + 1 < starts.size() ? starts[b + 1] : units.size();
    bp.begin = bp.first_unit * kBlockUnit;
    bp.n = std::min(n, bp.end_unit * kBlockUnit) - bp.begin;
    const Histogram& h = block_hists[b];
    bp.lengths = block_code_lengths(h, fh.code_limit);
    const auto codes = canonical_codes(bp.lengths);
    for (int s = 0; s < 256; ++s) {
      bp.enc[s] = codes[s] | static_cast<uint32_t>(bp.lengths[s]) << 24;
      bp.bits += h[s] * bp.lengths[s];
      bp.max_length = std::max<int>(bp.max_length, bp.lengths[s]);
      bp.symbols += bp.lengths[s] != 0;
    }
    bp.bit_begin = p.total_bits;
    p.total_bits += bp.bits;
    table_size += code_table_size(bp.lengths);
    p.blocks.push_back(bp);
  }
  p.layout = huffman_layout(table_size, p.total_bits, fh);
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
  uint8_t* entry = out.data() + plan.layout.table_offset;
  uint8_t* table = entry + kBlockEntrySize * plan.blocks.size();
  for (const BlockPlan& b : plan.blocks) {
    put_le<uint32_t>(entry, static_cast<uint32_t>(b.n));
    put_le<uint64_t>(entry + 4, b.bits);
    entry += kBlockEntrySize;
    write_code_table(b.lengths, table);
    table += code_table_size(b.lengths);
  }
}

void finish_huffman_chunk(const ChunkPlan& plan, size_t n, uint64_t checksum, std::vector<uint8_t>& out) {
  ChunkHeader ch;
  ch.mode = ChunkMode::huffman;
  ch.original_length = static_cast<uint32_t>(n);
  ch.payload_length = static_cast<uint32_t>(plan.layout.payload_length);
  ch.bit_length = plan.total_bits;
  ch.checksum = checksum;
  ch.blocks = static_cast<uint32_t>(plan.blocks.size());
  ch.meta_checksum = checksum32(out.data() + kChunkHeaderSize, plan.layout.words_offset - kChunkHeaderSize);
  write_chunk_header(ch, out.data());
}

std::vector<CodeBlock> read_code_blocks(const ChunkHeader& h, const uint8_t* payload, size_t avail, const FileHeader& fh,
                                        size_t* table_size, uint64_t index, uint64_t offset) {
  const uint64_t tables_at = offset + kChunkHeaderSize;
  auto where_at = [&](uint64_t at) { return "in chunk " + std::to_string(index) + " at byte offset " + std::to_string(at); };
  std::vector<CodeBlock> blocks;
  size_t pos = 0;
  auto finish = [&](CodeBlock& b) {
    b.min_length = kMaxCodeLength;
    for (uint8_t l : b.lengths)
      if (l) {
        b.min_length = std::min<int>(b.min_length, l);
        b.max_length = std::max<int>(b.max_length, l);
      }
  };
  if (fh.version < 2) {
    CodeBlock b;
    b.length = h.original_length;
    b.bits = h.bit_length;
    b.lengths = read_code_table(payload, avail, fh.code_limit, &pos, where_at(tables_at));
    finish(b);
    blocks.push_back(b);
    *table_size = pos;
    return blocks;
  }
  const size_t nb = h.blocks;
  if (avail < kBlockEntrySize * nb)
    throw_error(ErrorKind::bad_input, "truncated block table (" + std::to_string(nb) + " blocks) " + where_at(tables_at));
  pos = kBlockEntrySize * nb;
  uint64_t out_sum = 0, bit_sum = 0;
  blocks.resize(nb);
  for (size_t k = 0; k < nb; ++k) {
    CodeBlock& b = blocks[k];
    const uint8_t* e = payload + kBlockEntrySize * k;
    b.length = get_le<uint32_t>(e);
    b.bits = get_le<uint64_t>(e + 4);
    b.out_begin = out_sum;
    b.bit_begin = bit_sum;
    const std::string wb = "block " + std::to_string(k) + " " + where_at(tables_at + kBlockEntrySize * k);
    if (b.length == 0 || b.length > h.original_length - out_sum)
      throw_error(ErrorKind::bad_input, "length " + std::to_string(b.length) + " of " + wb + " does not fit the chunk's " +
                                            std::to_string(h.original_length) + " bytes");
    if (k + 1 < nb && b.length < kMinBlockSize)
      throw_error(ErrorKind::bad_input, "length " + std::to_string(b.length) + " of " + wb + " is below the minimum block size " +
                                            std::to_string(kMinBlockSize));
    if (b.bits < b.length || b.bits > uint64_t{b.length} * fh.code_limit || b.bits > h.bit_length - bit_sum)
      throw_error(ErrorKind::bad_input, "bit length " + std::to_string(b.bits) + " of " + wb + " impossible for its " +
                                            std::to_string(b.length) + " bytes and the chunk's " + std::to_string(h.bit_length) +
                                            " bits");
    out_sum += b.length;
    bit_sum += b.bits;
  }
  if (out_sum != h.original_length || bit_sum != h.bit_length)
    throw_error(ErrorKind::bad_input, "the block table adds up to " + std::to_string(out_sum) + " bytes and " +
                                          std::to_string(bit_sum) + " bits, the chunk header says " +
                                          std::to_string(h.original_length) + " and " + std::to_string(h.bit_length) + " " +
                                          where_at(tables_at));
  for (size_t k = 0; k < nb; ++k) {
    size_t used = 0;
    blocks[k].lengths = read_code_table(payload + pos, avail - pos, fh.code_limit, &used,
                                        "(block " + std::to_string(k) + ") " + where_at(tables_at + pos));
    pos += used;
    finish(blocks[k]);
  }
  *table_size = pos;
  return blocks;
}

}  // namespace hpcnn::huffman
