#include "huffman/cpu/stream.h"

#include <unistd.h>

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
  std::vector<uint8_t> in(header.chunk_size), out;
  std::vector<uint8_t> table;
  for (;;) {
    const size_t n = read_full(in_fd, in.data(), in.size());
    if (n == 0) break;
    codec.encode(in.data(), n, header, out);
    TableEntry e{st.encoded_bytes, static_cast<uint32_t>(out.size()), static_cast<uint32_t>(n)};
    table.resize(table.size() + kTableEntrySize);
    write_table_entry(e, table.data() + table.size() - kTableEntrySize);
    sink(out.data(), out.size());
    st.encoded_bytes += out.size();
    st.original_bytes += n;
    ++st.chunks;
    if (n < in.size()) break;
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
  std::vector<uint8_t> chunk, out(fh.chunk_size);
  std::vector<TableEntry> seen;
  for (uint64_t index = 0;; ++index) {
    chunk.resize(kChunkHeaderSize);
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
    chunk.resize(kChunkHeaderSize + h.payload_length);
    if (read_full(in_fd, chunk.data() + kChunkHeaderSize, h.payload_length) < h.payload_length)
      throw_error(ErrorKind::bad_input, "truncated stream: chunk payload cut short " + chunk_where(index, offset));
    codec.decode(h, chunk.data(), fh, out.data(), index, offset);
    sink(out.data(), h.original_length);
    seen.push_back({offset, static_cast<uint32_t>(chunk.size()), h.original_length});
    offset += chunk.size();
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
