// Inputs shared by the CPU and CUDA codec tests: the edge cases the huffgpu issue lists, and
// whole streams in memory. Errors are checked with hpcnn::testing::check_error (error_check.h).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "../error_check.h"
#include "huffman/format.h"
#include "huffman/stream.h"

namespace hpcnn::huffman::testing {

inline std::vector<uint8_t> text_like(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  const char* alphabet = "eeeeeeetttttaaaaooooiiinnnsshhrrdlu  \n,.";
  for (auto& b : v) b = static_cast<uint8_t>(alphabet[rng() % std::strlen(alphabet)]);
  return v;
}

inline FileHeader header(uint32_t chunk = 1u << 24, int seg_log2 = 8, bool gaps = true, int limit = 12) {
  FileHeader fh;
  fh.chunk_size = chunk;
  fh.segment_log2 = static_cast<uint8_t>(seg_log2);
  fh.flags = gaps ? kFlagGapArray : 0;
  fh.code_limit = static_cast<uint8_t>(limit);
  return fh;
}

// One byte, one repeated symbol, two symbols, sizes not a multiple of 4, text over 1 MiB (the
// pair-table encoder), all 256 symbols, random (stored raw), two skewed symbols, and Fibonacci
// counts (an unlimited Huffman code would need more than 16 bits).
inline std::vector<std::vector<uint8_t>> edge_case_inputs() {
  std::mt19937_64 rng(5);
  std::vector<std::vector<uint8_t>> inputs = {
      {42}, std::vector<uint8_t>(1001, 7), {1, 2}, text_like(12345, 1), text_like(1 << 20, 2)};
  std::vector<uint8_t> all(256 * 40);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint8_t>(i * 131);
  inputs.push_back(all);
  std::vector<uint8_t> random(300000);
  for (auto& b : random) b = static_cast<uint8_t>(rng());
  inputs.push_back(random);
  std::vector<uint8_t> two(777777);
  for (auto& b : two) b = rng() % 5 ? 'x' : 'y';
  inputs.push_back(two);
  std::vector<uint8_t> fib;
  uint64_t a = 1, b = 1;
  for (int s = 0; s < 25; ++s) {
    fib.insert(fib.end(), a, static_cast<uint8_t>(s));
    const uint64_t c = a + b;
    a = b;
    b = c;
  }
  inputs.push_back(fib);
  return inputs;
}

// A file descriptor reading `data` from its start (a memfd), for encode_stream/decode_stream.
class MemoryFd {
 public:
  explicit MemoryFd(const std::vector<uint8_t>& data) : fd_(::memfd_create("huffgpu-test", 0)) {
    REQUIRE(fd_ >= 0);
    REQUIRE(::write(fd_, data.data(), data.size()) == static_cast<ssize_t>(data.size()));
    REQUIRE(::lseek(fd_, 0, SEEK_SET) == 0);
  }
  ~MemoryFd() { ::close(fd_); }
  MemoryFd(const MemoryFd&) = delete;
  MemoryFd& operator=(const MemoryFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// The whole stream encode_stream writes for `in`.
inline std::vector<uint8_t> encode_to_memory(const std::vector<uint8_t>& in, const FileHeader& fh, int threads) {
  MemoryFd fd(in);
  std::vector<uint8_t> stream;
  encode_stream(
      fd.get(), [&](const uint8_t* p, size_t n) { stream.insert(stream.end(), p, p + n); }, fh, threads);
  return stream;
}

// Chunk k's entry in the chunk table at the end of a stream (offset and stored length).
inline TableEntry chunk_entry(const std::vector<uint8_t>& stream, uint64_t k) {
  const Trailer tr = read_trailer(stream.data() + stream.size() - kTrailerSize, stream.size() - kTrailerSize);
  REQUIRE(k < tr.chunk_count);
  return read_table_entry(stream.data() + tr.table_offset + k * kTableEntrySize);
}

}  // namespace hpcnn::huffman::testing
