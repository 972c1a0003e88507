#include "huffman/stream.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "huffman/cpu/decoder.h"
#include "huffman/cpu/encoder.h"

namespace hpcnn::huffman {

size_t read_full(int fd, uint8_t* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, buf + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_error(ErrorKind::io, std::string("read error: ") + std::strerror(errno));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

namespace {

// Bytes a regular file still holds after its read position (0 when unknown: pipes, devices).
size_t bytes_left(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  const off_t pos = ::lseek(fd, 0, SEEK_CUR);
  return pos >= 0 && st.st_size > pos ? static_cast<size_t>(st.st_size - pos) : 0;
}

// Reads up to n bytes into buf[at, at + n) (fewer only at end of input). buf grows only as data
// arrives, up to at + n: at once to what a regular file still holds (and a byte more, to see its
// end without growing again), else (pipes) fourfold from 64 KiB, so that memory follows the bytes
// read (at most 4x of them) rather than a --chunk-size or a length in a header; fourfold rather
// than twofold halves the copies and fresh pages of the first chunk from a pipe. Once buf is
// large enough (every chunk after the first), this is one read_full in place: no copy, no
// clearing.
size_t read_growing(int fd, std::vector<uint8_t>& buf, size_t at, size_t n) {
  constexpr size_t kFirst = 64 << 10;
  size_t got = 0;
  while (got < n) {
    if (buf.size() <= at + got)
      buf.resize(std::min(at + n, std::max({4 * buf.size(), at + kFirst, at + got + bytes_left(fd) + 1})));
    const size_t want = std::min(at + n, buf.size()) - at - got;
    const size_t r = read_full(fd, buf.data() + at + got, want);
    got += r;
    if (r < want) break;
  }
  return got;
}

}  // namespace

ChunkCodec cpu_codec(int threads) {
  ChunkCodec c;
  c.encode = [threads](const uint8_t* in, size_t n, const FileHeader& fh, std::vector<uint8_t>& out) {
    encode_chunk(in, n, fh, threads, out);
  };
  auto scratch = std::make_shared<DecoderScratch>();
  c.decode = [threads, scratch](const ChunkHeader& h, const uint8_t* chunk, const FileHeader& fh, uint8_t* out, uint64_t index,
                                uint64_t offset) { decode_chunk(h, chunk, fh, threads, out, *scratch, index, offset); };
  return c;
}

StreamStats encode_stream(int in_fd, const Sink& sink, const FileHeader& header, int threads) {
  return encode_stream(in_fd, sink, header, cpu_codec(threads));
}

StreamStats decode_stream(int in_fd, const Sink& sink, int threads) { return decode_stream(in_fd, sink, cpu_codec(threads)); }

StreamStats encode_stream(int in_fd, const Sink& sink, const FileHeader& header, const ChunkCodec& codec) {
  StreamStats st;
  uint8_t fh[kFileHeaderSize];
  write_file_header(header, fh);
  sink(fh, sizeof fh);
  st.encoded_bytes += sizeof fh;
  std::vector<uint8_t> in, out;
  std::vector<uint8_t> table;
  for (;;) {
    const size_t n = read_growing(in_fd, in, 0, header.chunk_size);
    if (n == 0) break;
    codec.encode(in.data(), n, header, out);
    TableEntry e{st.encoded_bytes, static_cast<uint32_t>(out.size()), static_cast<uint32_t>(n)};
    table.resize(table.size() + kTableEntrySize);
    write_table_entry(e, table.data() + table.size() - kTableEntrySize);
    sink(out.data(), out.size());
    st.encoded_bytes += out.size();
    st.original_bytes += n;
    ++st.chunks;
    if (n < header.chunk_size) break;
  }
  ChunkHeader end;
  end.mode = ChunkMode::end;
  end.bit_length = st.chunks;
  uint8_t eh[kChunkHeaderSize];
  write_chunk_header(end, eh);
  sink(eh, sizeof eh);
  st.encoded_bytes += sizeof eh;
  Trailer tr{st.chunks, st.original_bytes, st.encoded_bytes, checksum64(table.data(), table.size())};
  sink(table.data(), table.size());
  st.encoded_bytes += table.size();
  uint8_t tb[kTrailerSize];
  write_trailer(tr, tb);
  sink(tb, sizeof tb);
  st.encoded_bytes += sizeof tb;
  return st;
}

StreamStats decode_stream(int in_fd, const Sink& sink, const ChunkCodec& codec) {
  StreamStats st;
  uint8_t fhb[kFileHeaderSize];
  const FileHeader fh = read_file_header(fhb, read_full(in_fd, fhb, sizeof fhb));
  uint64_t offset = kFileHeaderSize;
  std::vector<uint8_t> chunk(kChunkHeaderSize), out;
  std::vector<TableEntry> seen;
  for (uint64_t index = 0;; ++index) {
    const size_t got = read_full(in_fd, chunk.data(), kChunkHeaderSize);
    if (got < kChunkHeaderSize)
      throw_error(ErrorKind::bad_input, "truncated stream: " + std::string(got ? "partial chunk header" : "no end marker") + " " +
                                            chunk_where(index, offset));
    const ChunkHeader h = read_chunk_header(chunk.data(), fh, index, offset);
    if (h.mode == ChunkMode::end) {
      if (h.bit_length != index)
        throw_error(ErrorKind::bad_input, "end marker counts " + std::to_string(h.bit_length) + " chunks, the stream holds " +
                                              std::to_string(index) + " " + chunk_where(index, offset));
      offset += kChunkHeaderSize;
      break;
    }
    if (read_growing(in_fd, chunk, kChunkHeaderSize, h.payload_length) < h.payload_length)
      throw_error(ErrorKind::bad_input, "truncated stream: chunk payload cut short " + chunk_where(index, offset));
    // The output buffer after the payload was read: original_length <= fh.chunk_size, and at most
    // 8x the payload of a Huffman chunk (read_chunk_header), so memory follows the data here too.
    if (out.size() < h.original_length) out.resize(h.original_length);
    codec.decode(h, chunk.data(), fh, out.data(), index, offset);
    sink(out.data(), h.original_length);
    const uint32_t stored = static_cast<uint32_t>(kChunkHeaderSize + h.payload_length);
    seen.push_back({offset, stored, h.original_length});
    offset += stored;
    st.original_bytes += h.original_length;
    ++st.chunks;
  }
  // Chunk table and trailer must agree with the chunks read.
  const uint64_t table_offset = offset;
  std::vector<uint8_t> table(seen.size() * kTableEntrySize);
  if (read_full(in_fd, table.data(), table.size()) < table.size())
    throw_error(ErrorKind::bad_input, "truncated stream: chunk table cut short at byte offset " + std::to_string(offset));
  for (size_t i = 0; i < seen.size(); ++i) {
    const TableEntry e = read_table_entry(table.data() + i * kTableEntrySize);
    if (e.offset != seen[i].offset || e.stored_length != seen[i].stored_length || e.original_length != seen[i].original_length)
      throw_error(ErrorKind::bad_input, "chunk table entry " + std::to_string(i) + " (at byte offset " +
                                            std::to_string(offset + i * kTableEntrySize) + ") does not match chunk " + std::to_string(i) +
                                            " at byte offset " + std::to_string(seen[i].offset));
  }
  offset += table.size();
  uint8_t tb[kTrailerSize];
  if (read_full(in_fd, tb, sizeof tb) < sizeof tb)
    throw_error(ErrorKind::bad_input, "truncated stream: trailer cut short at byte offset " + std::to_string(offset));
  const Trailer tr = read_trailer(tb, offset);
  if (tr.chunk_count != seen.size() || tr.original_size != st.original_bytes || tr.table_offset != table_offset ||
      tr.table_checksum != checksum64(table.data(), table.size()))
    throw_error(ErrorKind::bad_input, "trailer at byte offset " + std::to_string(offset) + " does not match the stream");
  offset += sizeof tb;
  uint8_t extra;
  if (read_full(in_fd, &extra, 1) != 0)
    throw_error(ErrorKind::bad_input, "unexpected data after the trailer at byte offset " + std::to_string(offset));
  st.encoded_bytes = offset;
  return st;
}

}  // namespace hpcnn::huffman
