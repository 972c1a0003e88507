// hpcnn huffman: whole streams through the CPU codec, chunk by chunk.
//
// encode_stream() reads its input in chunks of header.chunk_size bytes (any length, also over
// 4 GiB, also from a pipe) and hands the encoded bytes to `sink` as they are ready; memory
// stays at a few chunks and follows the data: buffers grow with the bytes actually read (and,
// when decoding, with each chunk's validated lengths), so a 3 KB input with a 1 GiB chunk size
// costs kilobytes, not a gigabyte. decode_stream() reads chunks in order, decodes each (in
// parallel over its segments), checks every chunk's checksum, and at the end checks the chunk
// table and trailer against what it read. With chunks of 64 KiB or more both overlap reading, coding and
// writing (the next chunk is read and the previous one handed to `sink` on two threads of their
// own while one is coded): `sink` is then called from another thread than the caller's, one call
// at a time, in stream order. Errors: ErrorKind::bad_input naming the chunk and
// byte offset (truncated stream, corrupt header or tables, checksum mismatch), ErrorKind::io for
// read errors.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "huffman/format.h"

namespace hpcnn::huffman {

using Sink = std::function<void(const uint8_t* data, size_t size)>;

struct StreamStats {
  uint64_t original_bytes = 0;
  uint64_t encoded_bytes = 0;
  uint64_t chunks = 0;
};

// The per-chunk work of a codec (CPU or CUDA); the stream layout is the same for both.
struct ChunkCodec {
  std::function<void(const uint8_t* in, size_t n, const FileHeader& fh, std::vector<uint8_t>& out)> encode;
  std::function<void(const ChunkHeader& h, const uint8_t* chunk, const FileHeader& fh, uint8_t* out, uint64_t index,
                     uint64_t offset)>
      decode;
};
ChunkCodec cpu_codec(int threads);

StreamStats encode_stream(int in_fd, const Sink& sink, const FileHeader& header, const ChunkCodec& codec);
StreamStats decode_stream(int in_fd, const Sink& sink, const ChunkCodec& codec);
// The CPU codec with `threads` threads.
StreamStats encode_stream(int in_fd, const Sink& sink, const FileHeader& header, int threads);
StreamStats decode_stream(int in_fd, const Sink& sink, int threads);

// Reads up to n bytes (fewer only at end of input). ErrorKind::io on failure.
size_t read_full(int fd, uint8_t* buf, size_t n);

}  // namespace hpcnn::huffman
