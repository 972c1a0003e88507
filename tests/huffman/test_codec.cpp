#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "core/error.h"
#include "huffman/bitstream.h"
#include "huffman/codebook.h"
#include "huffman/cpu/decoder.h"
#include "huffman/cpu/encoder.h"
#include "huffman/format.h"
#include "test_inputs.h"

using namespace hpcnn::huffman;
using testing::header;
using testing::text_like;

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

}  // namespace

TEST_CASE("edge-case inputs round trip in every mode", "[huffman]") {
  const auto inputs = testing::edge_case_inputs();
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
