#include "huffman/stream.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
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

// Runs tasks in the order given on a thread of its own (or at once, in the caller, when not
// `threaded`): the streams read chunk i+1 and write chunk i-1 while chunk i is coded. The
// destructor finishes what was submitted, so the buffers a task uses must outlive the worker.
class SerialWorker {
 public:
  explicit SerialWorker(bool threaded) {
    if (threaded) thread_ = std::thread([this] { loop(); });
  }
  ~SerialWorker() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(m_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  template <class F>
  auto submit(F f) -> std::future<decltype(f())> {
    auto task = std::make_shared<std::packaged_task<decltype(f())()>>(std::move(f));
    auto fut = task->get_future();
    if (!thread_.joinable()) {
      (*task)();  // the exception, if any, is kept in the future
      return fut;
    }
    {
      std::lock_guard<std::mutex> lock(m_);
      queue_.emplace_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return fut;
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return done_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool done_ = false;
  std::thread thread_;
};

// Chunks of at least this size are read, coded and written in overlap (below it a thread
// hand-off would cost more than it hides).
constexpr size_t kOverlapMinChunk = 64 << 10;

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
  // Two input and two output buffers: chunk i is encoded from in[i % 2] into out[i % 2] while
  // the reader fills in[(i + 1) % 2] and the writer hands out[(i - 1) % 2] to the sink.
  std::vector<uint8_t> in[2], out[2];
  std::vector<uint8_t> table;
  const bool overlap = header.chunk_size >= kOverlapMinChunk;
  SerialWorker reader(overlap), writer(overlap);
  std::future<void> written;
  size_t n = read_growing(in_fd, in[0], 0, header.chunk_size);
  for (int cur = 0; n > 0; cur ^= 1) {
    const bool last = n < header.chunk_size;
    // Without overlap the next chunk is read after this one is written (a live pipe then gets
    // each chunk's output without waiting for the next chunk's input).
    auto read_next = [&, c = cur ^ 1] { return read_growing(in_fd, in[c], 0, header.chunk_size); };
    std::future<size_t> next;
    if (!last && overlap) next = reader.submit(read_next);
    codec.encode(in[cur].data(), n, header, out[cur]);
    TableEntry e{st.encoded_bytes, static_cast<uint32_t>(out[cur].size()), static_cast<uint32_t>(n)};
    table.resize(table.size() + kTableEntrySize);
    write_table_entry(e, table.data() + table.size() - kTableEntrySize);
    if (written.valid()) written.get();
    written = writer.submit([&, c = cur] { sink(out[c].data(), out[c].size()); });
    if (!overlap) written.get();  // a write error at once, as a sequential writer reports it
    st.encoded_bytes += out[cur].size();
    st.original_bytes += n;
    ++st.chunks;
    n = last ? 0 : overlap ? next.get() : read_next();
  }
  if (written.valid()) written.get();
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
  // Chunk i is decoded from chunk[i % 2] into out[i % 2] while the reader reads chunk i + 1 into
  // the other buffer and the writer hands out[(i - 1) % 2] to the sink. Errors keep the order of
  // a sequential reader: chunk i's are reported before anything found in chunk i + 1.
  std::vector<uint8_t> chunk[2] = {std::vector<uint8_t>(kChunkHeaderSize), std::vector<uint8_t>(kChunkHeaderSize)};
  std::vector<uint8_t> out[2];
  std::vector<TableEntry> seen;
  // Reads the header (and, but for the end marker, the payload) of chunk `index` at `at` into
  // buf; nullopt for the end marker.
  auto read_chunk = [&](std::vector<uint8_t>& buf, uint64_t index, uint64_t at) -> std::optional<ChunkHeader> {
    const size_t got = read_full(in_fd, buf.data(), kChunkHeaderSize);
    if (got < kChunkHeaderSize)
      throw_error(ErrorKind::bad_input, "truncated stream: " + std::string(got ? "partial chunk header" : "no end marker") + " " +
                                            chunk_where(index, at));
    const ChunkHeader h = read_chunk_header(buf.data(), fh, index, at);
    if (h.mode == ChunkMode::end) {
      if (h.bit_length != index)
        throw_error(ErrorKind::bad_input, "end marker counts " + std::to_string(h.bit_length) + " chunks, the stream holds " +
                                              std::to_string(index) + " " + chunk_where(index, at));
      return std::nullopt;
    }
    if (read_growing(in_fd, buf, kChunkHeaderSize, h.payload_length) < h.payload_length)
      throw_error(ErrorKind::bad_input, "truncated stream: chunk payload cut short " + chunk_where(index, at));
    return h;
  };
  const bool overlap = fh.chunk_size >= kOverlapMinChunk;
  SerialWorker reader(overlap), writer(overlap);
  std::future<void> written;
  std::optional<ChunkHeader> h = read_chunk(chunk[0], 0, offset);
  for (uint64_t index = 0; h; ++index) {
    const int cur = static_cast<int>(index & 1);
    const uint32_t stored = static_cast<uint32_t>(kChunkHeaderSize + h->payload_length);
    auto read_next = [&, c = cur ^ 1, i = index + 1, at = offset + stored] { return read_chunk(chunk[c], i, at); };
    std::future<std::optional<ChunkHeader>> next;
    if (overlap) next = reader.submit(read_next);
    // The output buffer after the payload was read: original_length <= fh.chunk_size, and at most
    // 8x the payload of a Huffman chunk (read_chunk_header), so memory follows the data here too.
    if (out[cur].size() < h->original_length) out[cur].resize(h->original_length);
    codec.decode(*h, chunk[cur].data(), fh, out[cur].data(), index, offset);
    if (written.valid()) written.get();
    written = writer.submit([&, c = cur, n = h->original_length] { sink(out[c].data(), n); });
    if (!overlap) written.get();
    seen.push_back({offset, stored, h->original_length});
    offset += stored;
    st.original_bytes += h->original_length;
    ++st.chunks;
    h = overlap ? next.get() : read_next();
  }
  if (written.valid()) written.get();
  offset += kChunkHeaderSize;  // the end marker
  // Chunk table and trailer must agree with the chunks read.
  const uint64_t table_offset = offset;
  std::vector<uint8_t> table(seen.size() * kTableEntrySize);
  if (read_full(in_fd, table.data(), table.size()) < table.size())
    throw_error(ErrorKind::bad_input, "truncated stream: chunk table cut short at byte offset " + std::to_string(offset));
  for (size_t i = 0; i < seen.size(); ++i) {
    const TableEntry e = read_table_entry(table.data() + i * kTableEntrySize);
    if (e.offset != seen[i].offset || e.stored_length != seen[i].stored_length || e.original_length != seen[i].original_length)
      throw_error(ErrorKind::bad_input, "chunk table entry " + std::to_string(i) + " (at byte offset " +
                                            std::to_string(offset + i * kTableEntrySize) + ") does not match chunk " +
                                            std::to_string(i) + " at byte offset " + std::to_string(seen[i].offset));
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
