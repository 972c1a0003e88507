// hpcnn huffman: the huffgpu container format (see FORMAT.md beside this file).
//
// All integers little-endian. A stream is: file header (16 bytes), chunks (each a 40-byte chunk
// header and its payload), an end marker (a 40-byte chunk header with mode `end`), the chunk
// table (16 bytes per chunk) and the trailer (40 bytes). Chunks are independent: each has its
// own code, bit length, gap array and checksum, so they can be located through the chunk table
// and decoded in parallel, or read one after the other from a pipe.
// Parse errors: ErrorKind::bad_input naming the chunk and the byte offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hpcnn::huffman {

inline constexpr char kMagic[4] = {'H', 'U', 'F', 'G'};
inline constexpr char kTrailerMagic[4] = {'H', 'U', 'F', 'E'};
inline constexpr uint8_t kVersion = 2;         // written by the encoders
inline constexpr uint8_t kOldestVersion = 1;   // still read
inline constexpr size_t kBlockEntrySize = 12;  // version 2: per code block, length (u32) and bits (u64)
inline constexpr size_t kFileHeaderSize = 16;
inline constexpr size_t kChunkHeaderSize = 40;
inline constexpr size_t kTableEntrySize = 16;
inline constexpr size_t kTrailerSize = 40;
inline constexpr uint16_t kChunkMagic = 0x4B43;  // "CK"
inline constexpr uint8_t kFlagGapArray = 1;
inline constexpr uint32_t kMaxChunkSize = 1u << 30;
// Version 2: every code block of a chunk but its last holds at least this many input bytes.
inline constexpr uint32_t kMinBlockSize = 16u << 10;

enum class ChunkMode : uint8_t { huffman = 0, raw = 1, single_symbol = 2, end = 0xFF };

struct FileHeader {
  uint8_t version = kVersion;
  uint8_t flags = kFlagGapArray;
  uint8_t code_limit = 12;   // L: longest codeword, 8..16 bits
  uint8_t segment_log2 = 8;  // S = 2^segment_log2 bits: 7 (128) or 8 (256)
  uint32_t chunk_size = 4u << 20;
  bool gap_array() const { return flags & kFlagGapArray; }
  uint32_t segment_bits() const { return 1u << segment_log2; }
};

struct ChunkHeader {
  ChunkMode mode = ChunkMode::huffman;
  uint32_t original_length = 0;  // bytes of input in this chunk
  uint32_t payload_length = 0;   // bytes after the 40-byte header (kChunkHeaderSize)
  uint64_t bit_length = 0;       // huffman: exact bits of the bitstream; end: number of chunks
  uint64_t checksum = 0;         // XXH3-64 of the chunk's original bytes
  uint32_t meta_checksum = 0;    // huffman: XXH32 of the code table and gap array (with padding)
  uint32_t blocks = 0;           // version 2, huffman: number of code blocks (>= 1); otherwise 0
};

struct TableEntry {
  uint64_t offset = 0;         // of the chunk header, from the start of the stream
  uint32_t stored_length = 0;  // 40 + payload_length
  uint32_t original_length = 0;
};

struct Trailer {
  uint64_t chunk_count = 0;
  uint64_t original_size = 0;
  uint64_t table_offset = 0;
  uint64_t table_checksum = 0;  // XXH3-64 of the chunk table bytes
};

void write_file_header(const FileHeader& h, uint8_t out[kFileHeaderSize]);
FileHeader read_file_header(const uint8_t* in, size_t avail);
void write_chunk_header(const ChunkHeader& h, uint8_t out[kChunkHeaderSize]);
ChunkHeader read_chunk_header(const uint8_t in[kChunkHeaderSize], const FileHeader& fh, uint64_t index, uint64_t offset);
void write_table_entry(const TableEntry& e, uint8_t out[kTableEntrySize]);
TableEntry read_table_entry(const uint8_t in[kTableEntrySize]);
void write_trailer(const Trailer& t, uint8_t out[kTrailerSize]);
Trailer read_trailer(const uint8_t in[kTrailerSize], uint64_t offset);

// Layout of a huffman chunk's payload: code tables (version 2: the block table, then one
// code-length table per block), gap array and bitstream start offsets (each 4-byte aligned from
// the chunk start).
struct PayloadLayout {
  size_t table_offset = 0, table_size = 0;
  size_t gap_offset = 0, gap_size = 0;
  size_t words_offset = 0, words_count = 0;
  size_t payload_length = 0;
};
PayloadLayout huffman_layout(size_t table_size, uint64_t bit_length, const FileHeader& fh);

// The bits after the last codeword, up to the end of the last word, must be 0 (ErrorKind::bad_input).
void check_bitstream_padding(const uint8_t* words, size_t words_count, uint64_t bit_length, const std::string& where);

uint64_t checksum64(const void* data, size_t size);
uint32_t checksum32(const void* data, size_t size);

// checksum64 of a byte sequence fed in pieces (XXH3-64, streaming). Throws std::bad_alloc.
class Checksum64Stream {
 public:
  Checksum64Stream();
  ~Checksum64Stream();
  Checksum64Stream(const Checksum64Stream&) = delete;
  Checksum64Stream& operator=(const Checksum64Stream&) = delete;
  void add(const void* data, size_t size);
  uint64_t value() const;

 private:
  void* state_;  // XXH3_state_t
};
std::string chunk_where(uint64_t index, uint64_t offset);  // "in chunk 3 at byte offset 123"

}  // namespace hpcnn::huffman
