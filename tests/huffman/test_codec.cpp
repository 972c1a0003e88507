#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "core/error.h"
#include "huffman/bitstream.h"
#include "huffman/codebook.h"
#include "huffman/cpu/decoder.h"
#include "huffman/cpu/encoder.h"
#include "huffman/format.h"

using namespace hpcnn::huffman;

namespace {

std::vector<uint8_t> roundtrip(const std::vector<uint8_t>& in, const FileHeader& fh, int enc_threads, int dec_threads,
                               std::vector<uint8_t>* chunk_out = nullptr) {
  std::vector<uint8_t> chunk, out(in.size());
  encode_chunk(in.data(), in.size(), fh, enc_threads, chunk);
  const ChunkHeader h = read_chunk_header(chunk.data(), fh, 0, 16);
  REQUIRE(h.payload_length + kChunkHeaderSize == chunk.size());
  DecoderScratch s;
  decode_chunk(h, chunk.data(), fh, dec_threads, out.data(), s, 0, 16);
  if (chunk_out) *chunk_out = chunk;
  return out;
}

std::vector<uint8_t> text_like(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  const char* alphabet = "eeeeeeetttttaaaaooooiiinnnsshhrrdlu  \n,.";
  for (auto& b : v) b = static_cast<uint8_t>(alphabet[rng() % std::strlen(alphabet)]);
  return v;
}

FileHeader header(uint32_t chunk = 1u << 24, int seg_log2 = 8, bool gaps = true, int limit = 12) {
  FileHeader fh;
  fh.chunk_size = chunk;
  fh.segment_log2 = static_cast<uint8_t>(seg_log2);
  fh.flags = gaps ? kFlagGapArray : 0;
  fh.code_limit = static_cast<uint8_t>(limit);
  return fh;
}

}  // namespace

TEST_CASE("edge-case inputs round trip in every mode", "[huffman]") {
  std::mt19937_64 rng(5);
  std::vector<std::vector<uint8_t>> inputs = {
      {42},                                   // one byte: single-symbol chunk
      std::vector<uint8_t>(1001, 7),          // one repeated symbol
      {1, 2},                                 // two symbols, tiny
      text_like(12345, 1),                    // size not a multiple of 4
      text_like(1 << 20, 2),
  };
  std::vector<uint8_t> all(256 * 40);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint8_t>(i * 131);
  inputs.push_back(all);  // all 256 symbols
  std::vector<uint8_t> random(300000);
  for (auto& b : random) b = static_cast<uint8_t>(rng());
  inputs.push_back(random);  // incompressible: stored raw
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
  inputs.push_back(fib);  // unlimited Huffman would need > 16 bits
  for (const auto& in : inputs)
    for (int limit : {8, 12, 16})
      for (int seg : {7, 8})
        for (bool gaps : {true, false})
          for (int t : {1, 3}) CHECK(roundtrip(in, header(1u << 24, seg, gaps, limit), t, t) == in);
}

TEST_CASE("the encoded bytes do not depend on the thread count", "[huffman]") {
  const auto in = text_like(3 << 20, 9);
  std::vector<uint8_t> ref, got;
  roundtrip(in, header(), 1, 1, &ref);
  for (int t : {2, 3, 5, 8, 16}) {
    CHECK(roundtrip(in, header(), t, 1, &got) == in);
    CHECK(got == ref);
  }
}

TEST_CASE("chunk modes: raw for random data, single symbol for a constant", "[huffman]") {
  std::vector<uint8_t> chunk;
  std::vector<uint8_t> constant(5000, 9);
  roundtrip(constant, header(), 1, 1, &chunk);
  CHECK(read_chunk_header(chunk.data(), header(), 0, 0).mode == ChunkMode::single_symbol);
  std::mt19937_64 rng(1);
  std::vector<uint8_t> random(100000);
  for (auto& b : random) b = static_cast<uint8_t>(rng());
  roundtrip(random, header(), 1, 1, &chunk);
  CHECK(read_chunk_header(chunk.data(), header(), 0, 0).mode == ChunkMode::raw);
}

TEST_CASE("the gap array holds the first codeword boundary of every segment", "[huffman]") {
  for (int seg : {7, 8}) {
    const auto in = text_like(1500007, 4);  // over 1 MiB: the pair-table encoder path
    const FileHeader fh = header(1u << 24, seg);
    std::vector<uint8_t> chunk;
    roundtrip(in, fh, 3, 1, &chunk);
    const ChunkHeader h = read_chunk_header(chunk.data(), fh, 0, 0);
    size_t table_size = 0;
    const CodeLengths l = read_code_table(chunk.data() + kChunkHeaderSize, h.payload_length, 12, &table_size, "");
    const PayloadLayout lay = huffman_layout(table_size, h.bit_length, fh);
    // Independent walk: codeword starts from the symbol lengths.
    std::vector<uint64_t> starts;
    uint64_t p = 0;
    for (uint8_t b : in) {
      starts.push_back(p);
      p += l[b];
    }
    REQUIRE(p == h.bit_length);
    starts.push_back(p);
    const uint32_t S = 1u << seg;
    size_t j = 0;
    for (uint64_t k = 0; k < segment_count(h.bit_length, S); ++k) {
      while (starts[j] < k * S) ++j;
      CHECK(read_gap(chunk.data() + lay.gap_offset, k) == starts[j] - k * S);
    }
  }
}

TEST_CASE("corrupted chunks decode correctly or fail naming the chunk", "[huffman]") {
  const auto in = text_like(100000, 7);
  const FileHeader fh = header();
  std::vector<uint8_t> chunk;
  roundtrip(in, fh, 1, 1, &chunk);
  std::mt19937_64 rng(11);
  DecoderScratch s;
  std::vector<uint8_t> out(in.size());
  int failures = 0;
  for (int trial = 0; trial < 400; ++trial) {
    auto bad = chunk;
    const size_t pos = rng() % bad.size();
    bad[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
    try {
      const ChunkHeader h = read_chunk_header(bad.data(), fh, 3, 1000);
      if (h.payload_length + kChunkHeaderSize != bad.size()) throw hpcnn::Error(hpcnn::ErrorKind::bad_input, "in chunk 3 length");
      decode_chunk(h, bad.data(), fh, 2, out.data(), s, 3, 1000);
      CHECK(out == in);  // a flip in padding bits changes nothing
    } catch (const hpcnn::Error& e) {
      CHECK(std::string(e.what()).find("chunk 3") != std::string::npos);
      ++failures;
    }
  }
  CHECK(failures > 300);
}

TEST_CASE("peek32 (shared with the CUDA decoder) reads any 32 bits MSB first", "[huffman]") {
  std::mt19937_64 rng(21);
  std::vector<uint32_t> words(9);
  for (auto& w : words) w = static_cast<uint32_t>(rng());
  auto bit = [&](uint64_t b) -> uint32_t { return b / 32 < words.size() ? (words[b / 32] >> (31 - b % 32)) & 1 : 0; };
  for (uint64_t pos = 0; pos < 32 * words.size(); ++pos) {
    uint32_t want = 0;
    for (int i = 0; i < 32; ++i) want = want << 1 | bit(pos + i);
    REQUIRE(peek32(words.data(), words.size(), pos) == want);
  }
}
