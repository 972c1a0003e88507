#include "huffman/format.h"

#include <bit>
#include <cstring>
#include <new>

#include "core/error.h"
#include "core/xxhash.h"
#include "huffman/bitstream.h"

static_assert(std::endian::native == std::endian::little, "the huffgpu codec assumes a little-endian host");

namespace hpcnn::huffman {
namespace {

template <class T>
void put(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <class T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
size_t align4(size_t n) { return (n + 3) & ~size_t{3}; }

// libxxhash's x86 dispatch runs XXH3 with AVX2 or AVX-512 and returns with the vector registers
// upper halves dirty (no vzeroupper): legacy-SSE code after it (the baseline build's vectorized
// loops and double arithmetic) then ran up to 4x slower on the reference machine (AMD EPYC,
// Zen 4). Every call through the dispatch ends with a vzeroupper where the CPU has AVX.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(HPCNN_XXHASH_HEADER_ONLY)
__attribute__((target("avx"))) void zero_upper_avx() { __builtin_ia32_vzeroupper(); }
void (*const zero_upper)() = __builtin_cpu_supports("avx") ? zero_upper_avx : [] {};
#else
void zero_upper() {}
#endif

}  // namespace

std::string chunk_where(uint64_t index, uint64_t offset) {
  return "in chunk " + std::to_string(index) + " at byte offset " + std::to_string(offset);
}

uint64_t checksum64(const void* data, size_t size) {
  const uint64_t h = XXH3_64bits(data, size);
  zero_upper();
  return h;
}
uint32_t checksum32(const void* data, size_t size) { return XXH32(data, size, 0); }

Checksum64Stream::Checksum64Stream() : state_(XXH3_createState()) {
  if (!state_) throw std::bad_alloc();
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}
Checksum64Stream::~Checksum64Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Checksum64Stream::add(const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
  zero_upper();
}
uint64_t Checksum64Stream::value() const { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_)); }

void write_file_header(const FileHeader& h, uint8_t out[kFileHeaderSize]) {
  std::memcpy(out, kMagic, 4);
  out[4] = h.version;
  out[5] = h.flags;
  out[6] = h.code_limit;
  out[7] = h.segment_log2;
  put<uint32_t>(out + 8, h.chunk_size);
  put<uint32_t>(out + 12, XXH32(out, 12, 0));
}

FileHeader read_file_header(const uint8_t* in, size_t avail) {
  if (avail < kFileHeaderSize)
    throw_error(ErrorKind::bad_input, avail == 0
                                          ? "empty input: not a huffgpu stream"
                                          : "truncated file header (" + std::to_string(avail) + " bytes) at byte offset 0");
  if (std::memcmp(in, kMagic, 4) != 0) throw_error(ErrorKind::bad_input, "not a huffgpu stream (wrong magic at byte offset 0)");
  FileHeader h;
  h.version = in[4];
  if (h.version < kOldestVersion || h.version > kVersion)
    throw_error(ErrorKind::unsupported, "huffgpu format version " + std::to_string(h.version) +
                                            " is not supported (this build reads versions " + std::to_string(kOldestVersion) +
                                            " to " + std::to_string(kVersion) + ")");
  if (get<uint32_t>(in + 12) != XXH32(in, 12, 0))
    throw_error(ErrorKind::bad_input, "file header checksum mismatch at byte offset 12");
  h.flags = in[5];
  h.code_limit = in[6];
  h.segment_log2 = in[7];
  h.chunk_size = get<uint32_t>(in + 8);
  if (h.flags & ~kFlagGapArray) throw_error(ErrorKind::bad_input, "unknown flags in the file header at byte offset 5");
  if (h.code_limit < 8 || h.code_limit > kMaxCodeLength)
    throw_error(ErrorKind::bad_input, "code length limit " + std::to_string(h.code_limit) + " outside 8..16 at byte offset 6");
  if (h.segment_log2 != 7 && h.segment_log2 != 8)
    throw_error(ErrorKind::bad_input,
                "segment size 2^" + std::to_string(h.segment_log2) + " is not 128 or 256 bits at byte offset 7");
  if (h.chunk_size == 0 || h.chunk_size > kMaxChunkSize)
    throw_error(ErrorKind::bad_input, "chunk size " + std::to_string(h.chunk_size) + " out of range at byte offset 8");
  return h;
}

void write_chunk_header(const ChunkHeader& h, uint8_t out[kChunkHeaderSize]) {
  std::memset(out, 0, kChunkHeaderSize);
  put<uint16_t>(out, kChunkMagic);
  out[2] = static_cast<uint8_t>(h.mode);
  put<uint32_t>(out + 4, h.original_length);
  put<uint32_t>(out + 8, h.payload_length);
  put<uint64_t>(out + 16, h.bit_length);
  put<uint64_t>(out + 24, h.checksum);
  put<uint32_t>(out + 32, h.meta_checksum);
  put<uint32_t>(out + 36, h.blocks);
  put<uint32_t>(out + 12, XXH32(out, kChunkHeaderSize, 0));  // over the header with this field 0
}

ChunkHeader read_chunk_header(const uint8_t in[kChunkHeaderSize], const FileHeader& fh, uint64_t index, uint64_t offset) {
  const std::string where = chunk_where(index, offset);
  if (get<uint16_t>(in) != kChunkMagic) throw_error(ErrorKind::bad_input, "bad chunk header magic " + where);
  uint8_t copy[kChunkHeaderSize];
  std::memcpy(copy, in, kChunkHeaderSize);
  std::memset(copy + 12, 0, 4);
  if (get<uint32_t>(in + 12) != XXH32(copy, kChunkHeaderSize, 0))
    throw_error(ErrorKind::bad_input, "chunk header checksum mismatch " + where);
  ChunkHeader h;
  h.mode = static_cast<ChunkMode>(in[2]);
  h.original_length = get<uint32_t>(in + 4);
  h.payload_length = get<uint32_t>(in + 8);
  h.bit_length = get<uint64_t>(in + 16);
  h.checksum = get<uint64_t>(in + 24);
  h.meta_checksum = get<uint32_t>(in + 32);
  h.blocks = get<uint32_t>(in + 36);
  const bool has_blocks = fh.version >= 2 && h.mode == ChunkMode::huffman;
  if (!has_blocks && h.blocks != 0) throw_error(ErrorKind::bad_input, "reserved chunk header bytes are not zero " + where);
  switch (h.mode) {
    case ChunkMode::end:
      if (h.original_length || h.payload_length) throw_error(ErrorKind::bad_input, "malformed end marker " + where);
      return h;
    case ChunkMode::raw:
      if (h.payload_length != h.original_length)
        throw_error(ErrorKind::bad_input, "raw chunk with payload length != original length " + where);
      break;
    case ChunkMode::single_symbol:
      if (h.payload_length != 1)
        throw_error(ErrorKind::bad_input,
                    "single-symbol chunk with payload length " + std::to_string(h.payload_length) + " " + where);
      break;
    case ChunkMode::huffman:
      if (h.bit_length == 0 || h.bit_length > uint64_t{h.original_length} * kMaxCodeLength || h.bit_length < h.original_length)
        throw_error(ErrorKind::bad_input, "bit length " + std::to_string(h.bit_length) + " impossible for " +
                                              std::to_string(h.original_length) + " symbols " + where);
      // The bitstream's words alone: so a reader's output buffer (original length <= bit length)
      // stays within 8x the payload it has read.
      // Every block but the last holds at least kBlockUnit (16 KiB) bytes.
      if (has_blocks && (h.blocks == 0 || h.blocks > (uint64_t{h.original_length} + kMinBlockSize - 1) / kMinBlockSize))
        throw_error(ErrorKind::bad_input,
                    "block count " + std::to_string(h.blocks) + " impossible for " + std::to_string(h.original_length) +
                        " bytes (every block but the last holds at least " + std::to_string(kMinBlockSize) + ") " + where);
      if (h.payload_length < (h.bit_length + 31) / 32 * 4)
        throw_error(ErrorKind::bad_input, "payload length " + std::to_string(h.payload_length) + " too short for " +
                                              std::to_string(h.bit_length) + " bits " + where);
      break;
    default:
      throw_error(ErrorKind::bad_input, "unknown chunk mode " + std::to_string(in[2]) + " " + where);
  }
  if (h.original_length == 0 || h.original_length > fh.chunk_size)
    throw_error(ErrorKind::bad_input, "chunk original length " + std::to_string(h.original_length) + " outside 1.." +
                                          std::to_string(fh.chunk_size) + " " + where);
  if (h.payload_length > kMaxChunkSize + 4096) throw_error(ErrorKind::bad_input, "chunk payload length too large " + where);
  return h;
}

void write_table_entry(const TableEntry& e, uint8_t out[kTableEntrySize]) {
  put<uint64_t>(out, e.offset);
  put<uint32_t>(out + 8, e.stored_length);
  put<uint32_t>(out + 12, e.original_length);
}

TableEntry read_table_entry(const uint8_t in[kTableEntrySize]) {
  return {get<uint64_t>(in), get<uint32_t>(in + 8), get<uint32_t>(in + 12)};
}

void write_trailer(const Trailer& t, uint8_t out[kTrailerSize]) {
  put<uint64_t>(out, t.chunk_count);
  put<uint64_t>(out + 8, t.original_size);
  put<uint64_t>(out + 16, t.table_offset);
  put<uint64_t>(out + 24, t.table_checksum);
  std::memcpy(out + 32, kTrailerMagic, 4);
  put<uint32_t>(out + 36, XXH32(out, 36, 0));
}

Trailer read_trailer(const uint8_t in[kTrailerSize], uint64_t offset) {
  const std::string where = "in the trailer at byte offset " + std::to_string(offset);
  if (std::memcmp(in + 32, kTrailerMagic, 4) != 0) throw_error(ErrorKind::bad_input, "bad trailer magic " + where);
  if (get<uint32_t>(in + 36) != XXH32(in, 36, 0)) throw_error(ErrorKind::bad_input, "trailer checksum mismatch " + where);
  return {get<uint64_t>(in), get<uint64_t>(in + 8), get<uint64_t>(in + 16), get<uint64_t>(in + 24)};
}

void check_bitstream_padding(const uint8_t* words, size_t words_count, uint64_t bit_length, const std::string& where) {
  const uint32_t used = static_cast<uint32_t>(bit_length % 32);
  if (used == 0 || words_count == 0) return;
  const uint32_t last = get<uint32_t>(words + 4 * (words_count - 1));
  if (last & ((1u << (32 - used)) - 1)) throw_error(ErrorKind::bad_input, "non-zero padding bits after the bitstream " + where);
}

PayloadLayout huffman_layout(size_t table_size, uint64_t bit_length, const FileHeader& fh) {
  PayloadLayout l;
  l.table_offset = kChunkHeaderSize;
  l.table_size = table_size;
  l.gap_offset = align4(l.table_offset + table_size);
  l.gap_size = fh.gap_array() ? static_cast<size_t>((segment_count(bit_length, fh.segment_bits()) + 1) / 2) : 0;
  l.words_offset = align4(l.gap_offset + l.gap_size);
  l.words_count = static_cast<size_t>((bit_length + 31) / 32);
  l.payload_length = l.words_offset + l.words_count * 4 - kChunkHeaderSize;
  return l;
}

}  // namespace hpcnn::huffman
