// Code blocks (format version 2): where the encoder splits a chunk, the block table's checks, and
// the golden streams of both format versions.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "core/error.h"
#include "huffman/block_split.h"
#include "huffman/chunk_plan.h"
#include "huffman/codebook.h"
#include "huffman/cpu/decoder.h"
#include "huffman/cpu/encoder.h"
#include "huffman/format.h"
#include "huffman/stream.h"
#include "test_inputs.h"

using namespace hpcnn::huffman;
using hpcnn::ErrorKind;
using hpcnn::testing::check_error;
using testing::header;
using testing::text_like;

namespace {

// Bytes from one of four sources, so that neighbouring units differ clearly or not at all.
std::vector<uint8_t> unit_of(char kind, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  switch (kind) {
    case 'A':
      return text_like(n, seed);  // text
    case 'B':
      for (auto& b : v) b = static_cast<uint8_t>(200 + rng() % 8 + rng() % 8);
      break;  // a narrow band
    case 'C':
      for (auto& b : v) b = static_cast<uint8_t>(rng() % 64 * 4);
      break;  // 64 values
    default:
      for (auto& b : v) b = static_cast<uint8_t>(rng() % 2 ? 0 : 255);
      break;  // two values
  }
  return v;
}

// The real cost of one block under the split objective: its length-limited code's bits, its
// code-length table and block-table entry, and the penalty.
uint64_t real_cost(const Histogram& h, int limit) {
  const CodeLengths l = block_code_lengths(h, limit);
  uint64_t bits = 0;
  for (int s = 0; s < 256; ++s) bits += h[s] * l[s];
  return bits + 8 * (code_table_size(l) + kBlockEntrySize) + kBlockPenaltyBits;
}

std::vector<Histogram> unit_histograms(const std::vector<uint8_t>& in) {
  std::vector<Histogram> units(block_units(in.size()), Histogram{});
  for (size_t u = 0; u < units.size(); ++u)
    byte_histogram(in.data() + u * kBlockUnit, std::min(in.size(), (u + 1) * kBlockUnit) - u * kBlockUnit, units[u].data());
  return units;
}

uint64_t partition_cost(const std::vector<Histogram>& units, const std::vector<uint32_t>& starts, int limit) {
  uint64_t cost = 0;
  for (size_t b = 0; b < starts.size(); ++b) {
    Histogram h{};
    for (size_t u = starts[b]; u < (b + 1 < starts.size() ? starts[b + 1] : units.size()); ++u)
      for (int s = 0; s < 256; ++s) h[s] += units[u][s];
    cost += real_cost(h, limit);
  }
  return cost;
}

std::vector<uint8_t> read_file(const std::string& name) {
  std::ifstream s(std::string(HPCNN_TEST_DATA_DIR) + "/huffman_golden/" + name, std::ios::binary);
  REQUIRE(s.good());
  return {std::istreambuf_iterator<char>(s), std::istreambuf_iterator<char>()};
}

std::vector<uint8_t> decode_to_memory(const std::vector<uint8_t>& stream, int threads) {
  testing::MemoryFd fd(stream);
  std::vector<uint8_t> out;
  decode_stream(
      fd.get(), [&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); }, threads);
  return out;
}

}  // namespace

TEST_CASE("the block splitter finds the optimum partition of an exhaustive search", "[huffman]") {
  // Units of four unlike kinds in runs: the best partition under real codes (searched over all
  // 2^(U-1) partitions) cuts exactly where the kind changes; the greedy entropy-based splitter
  // must find the same cuts.
  for (const std::string kinds : {"AABBBAC", "ABCDABCD", "AAAAAAAA", "CCDDDDAB", "AAAAAAAAAAB"}) {
    std::vector<uint8_t> in;
    for (size_t u = 0; u < kinds.size(); ++u) {
      const auto part = unit_of(kinds[u], kBlockUnit, 100 + u);
      in.insert(in.end(), part.begin(), part.end());
    }
    in.resize(in.size() - 5000);  // a short last unit
    const auto units = unit_histograms(in);
    const size_t U = units.size();
    uint64_t best = UINT64_MAX;
    std::vector<uint32_t> best_starts;
    for (uint64_t mask = 0; mask < (uint64_t{1} << (U - 1)); ++mask) {
      std::vector<uint32_t> starts{0};
      for (size_t u = 1; u < U; ++u)
        if (mask >> (u - 1) & 1) starts.push_back(static_cast<uint32_t>(u));
      const uint64_t c = partition_cost(units, starts, 12);
      if (c < best) best = c, best_starts = starts;
    }
    std::vector<uint32_t> runs{0};
    for (size_t u = 1; u < U; ++u)
      if (kinds[u] != kinds[u - 1]) runs.push_back(static_cast<uint32_t>(u));
    INFO(kinds);
    CHECK(best_starts == runs);  // the test data is what it claims to be
    CHECK(split_blocks(units) == best_starts);
  }
}

TEST_CASE("the splitter's cost estimate: the entropy in 2^-24 bits, the same on both paths", "[huffman]") {
  // block_cost_q24 = max(order-0 entropy, n bits) + table + penalty, in units of 2^-24 bits,
  // from integer logarithms (a table plus a linear step). Checked against the entropy computed
  // in long double, for histograms of few and many values, small counts (the table alone) and
  // counts up to 2^32 - 1 (the step), on the AVX-512 path (where the CPU has it) and the scalar
  // one, which must agree to the unit; and whole splits agree on both paths.
  std::mt19937_64 rng(24);
  for (int trial = 0; trial < 3000; ++trial) {
    Histogram h{};
    const int values = 1 + static_cast<int>(rng() % 256);
    const int bits = 1 + static_cast<int>(rng() % 25);  // counts below 2^bits
    for (int k = 0; k < values; ++k) h[rng() % 256] = rng() % (uint64_t{1} << bits) + (trial % 3 == 0);
    if (trial == 0) h[3] = (uint64_t{1} << 32) - 1, h[200] = 1;  // the largest count
    long double n = 0, s = 0;
    int nsym = 0;
    for (uint64_t c : h) {
      n += c;
      if (c) s += c * std::log2(static_cast<long double>(c)), ++nsym;
    }
    if (n == 0) continue;
    uint64_t total = 0;
    for (uint64_t c : h) total += c;
    if (total >> 32) continue;  // a chunk holds below 2^32 bytes
    const long double entropy = std::max(n * std::log2(n) - s, n);
    const long double table = 8 * (32 + (nsym + 1) / 2) + 96 + kBlockPenaltyBits;
    INFO("trial " << trial << ", " << nsym << " values, n " << static_cast<double>(n));
    set_split_vector_enabled(true);
    const int64_t vec = block_cost_q24(h);
    set_split_vector_enabled(false);
    const int64_t scalar = block_cost_q24(h);
    set_split_vector_enabled(true);
    CHECK(vec == scalar);
    // Each logarithm is within about 1e-7 of the true one (2^-24 rounding, the step's error):
    // the worst seen was 1.9e-7 bits per byte.
    CHECK(std::fabs(static_cast<long double>(scalar) / (1 << 24) - (entropy + table)) <= 4e-7L * (n + 1));
  }
  check_error(
      [] {
        Histogram h{};
        h[0] = uint64_t{1} << 32;
        block_cost_q24(h);
      },
      ErrorKind::usage, "below 2^32");
  check_error(
      [] {
        Histogram h{};
        h[0] = h[9] = uint64_t{1} << 31;
        block_cost_q24(h);
      },
      ErrorKind::usage, "below 2^32");
  CHECK(block_cost_q24(Histogram{}) == 0);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<uint8_t> in;
    for (int u = 0; u < 40; ++u) {
      const auto part = unit_of("ABCD"[rng() % (trial % 4 + 1)], kBlockUnit - (u == 39 ? 777 : 0), rng());
      in.insert(in.end(), part.begin(), part.end());
    }
    const auto units = unit_histograms(in);
    set_split_vector_enabled(false);
    const auto scalar = split_blocks(units);
    set_split_vector_enabled(true);
    CHECK(split_blocks(units) == scalar);
  }
}

TEST_CASE("code blocks follow the data inside a chunk and pay for their tables", "[huffman]") {
  // Text, a narrow band and text again, 160 KiB each (10 units), in one chunk: three blocks, cut
  // at the unit boundaries where the data changes; the chunk is smaller than with one code (the
  // one-code size computed here from the whole histogram), the same for every thread count, and
  // decodes with every thread count, with and without gap arrays.
  std::vector<uint8_t> in;
  for (char k : {'A', 'B', 'A'}) {
    const auto part = unit_of(k, 10 * kBlockUnit, static_cast<uint64_t>(k));
    in.insert(in.end(), part.begin(), part.end());
  }
  for (bool gaps : {true, false}) {
    const FileHeader fh = header(1u << 24, 8, gaps);
    std::vector<uint8_t> ref, chunk, out(in.size());
    encode_chunk(in.data(), in.size(), fh, 1, ref);
    const ChunkHeader h = read_chunk_header(ref.data(), fh, 0, 0);
    REQUIRE(h.mode == ChunkMode::huffman);
    REQUIRE(h.blocks == 3);
    size_t table_size = 0;
    const auto blocks = read_code_blocks(h, ref.data() + kChunkHeaderSize, h.payload_length, fh, &table_size, 0, 0);
    CHECK(blocks[1].out_begin == 10 * kBlockUnit);
    CHECK(blocks[2].out_begin == 20 * kBlockUnit);
    Histogram total{};
    byte_histogram(in.data(), in.size(), total.data());
    const CodeLengths one = limited_code_lengths(total, 12);
    uint64_t one_bits = 0;
    for (int s = 0; s < 256; ++s) one_bits += total[s] * one[s];
    CHECK(h.bit_length + 8 * table_size < one_bits * 95 / 100);  // the band costs text's code dearly
    for (int t : {2, 3, 8}) {
      encode_chunk(in.data(), in.size(), fh, t, chunk);
      CHECK(chunk == ref);
      DecoderScratch s;
      std::fill(out.begin(), out.end(), 0);
      decode_chunk(h, ref.data(), fh, t, out.data(), s, 0, 0);
      CHECK(out == in);
    }
  }
}

TEST_CASE("stationary data stays one block", "[huffman]") {
  const auto in = text_like(3 << 20, 31);
  std::vector<uint8_t> chunk;
  encode_chunk(in.data(), in.size(), header(), 2, chunk);
  CHECK(read_chunk_header(chunk.data(), header(), 0, 0).blocks == 1);
}

TEST_CASE("a bad block table is refused naming the chunk and block", "[huffman]") {
  std::vector<uint8_t> in;
  for (char k : {'A', 'D', 'C'}) {
    const auto part = unit_of(k, 3 * kBlockUnit, 7);
    in.insert(in.end(), part.begin(), part.end());
  }
  const FileHeader fh = header();
  std::vector<uint8_t> chunk;
  encode_chunk(in.data(), in.size(), fh, 1, chunk);
  const ChunkHeader h = read_chunk_header(chunk.data(), fh, 0, 0);
  REQUIRE(h.blocks == 3);
  auto with = [&](size_t block, uint32_t length, uint64_t bits) {
    auto bad = chunk;
    uint8_t* e = bad.data() + kChunkHeaderSize + kBlockEntrySize * block;
    for (int i = 0; i < 4; ++i) e[i] = static_cast<uint8_t>(length >> (8 * i));
    for (int i = 0; i < 8; ++i) e[4 + i] = static_cast<uint8_t>(bits >> (8 * i));
    return bad;
  };
  auto entry = [&](size_t block, int field) {
    const uint8_t* e = chunk.data() + kChunkHeaderSize + kBlockEntrySize * block;
    uint64_t v = 0;
    for (int i = field == 0 ? 3 : 11; i >= (field == 0 ? 0 : 4); --i) v = v << 8 | e[i];
    return v;
  };
  size_t ts = 0;
  auto refused = [&](const std::vector<uint8_t>& bad, const std::string& words) {
    check_error([&] { read_code_blocks(h, bad.data() + kChunkHeaderSize, h.payload_length, fh, &ts, 4, 1000); },
                ErrorKind::bad_input, words);
    // Through the decoder the same bytes fail too (the table check or the metadata checksum).
    std::vector<uint8_t> out(in.size());
    DecoderScratch s;
    check_error([&] { decode_chunk(h, bad.data(), fh, 1, out.data(), s, 4, 1000); }, ErrorKind::bad_input,
                "in chunk 4 at byte offset 10");
  };
  const uint32_t len0 = static_cast<uint32_t>(entry(0, 0));
  const uint64_t bits0 = entry(0, 1);
  CHECK(len0 == 3 * kBlockUnit);
  refused(with(0, 0, bits0), "length 0 of block 0 in chunk 4 at byte offset 1040");
  refused(with(1, static_cast<uint32_t>(kBlockUnit - 1), entry(1, 1)), "below the minimum block size 16384");
  refused(with(2, static_cast<uint32_t>(entry(2, 0)) - 1, entry(2, 1)), "the block table adds up to");
  refused(with(0, len0, len0 - 1), "impossible for its");
  refused(with(2, static_cast<uint32_t>(in.size()), entry(2, 1)), "does not fit the chunk's");
  // A block count the chunk cannot hold is refused with the header.
  ChunkHeader big = h;
  big.blocks = static_cast<uint32_t>(in.size() / kBlockUnit + 1);
  uint8_t hb[kChunkHeaderSize];
  write_chunk_header(big, hb);
  check_error([&] { read_chunk_header(hb, fh, 4, 1000); }, ErrorKind::bad_input, "block count 10 impossible");
  big.blocks = 0;
  write_chunk_header(big, hb);
  check_error([&] { read_chunk_header(hb, fh, 4, 1000); }, ErrorKind::bad_input, "block count 0 impossible");
}

TEST_CASE("golden streams: version 1 still decodes, version 2 is what the encoder writes", "[huffman]") {
  // tests/data/huffman_golden/: mixed.bin (text, zeros, JPEG bytes, a game database) and the
  // streams of it made by huffgpu-encode at commit 0a74df2 (version 1) and by this encoder
  // (version 2), with their options in the name. A change of the encoder's output (block
  // decisions, codes, layout) or of the decoder's reading fails here.
  const auto original = read_file("mixed.bin");
  REQUIRE(original.size() == 98304);
  struct Case {
    std::string name;
    FileHeader fh;
  };
  const std::vector<Case> cases = {{"default", header(4u << 20)},
                                   {"s256-c8k", header(8192)},
                                   {"nogap-c8k", header(8192, 8, false)},
                                   {"s128-l9-c32k", header(32768, 7, true, 9)}};
  for (const auto& c : cases) {
    INFO(c.name);
    const auto v1 = read_file("mixed.v1-" + c.name + ".huf");
    CHECK(v1[4] == 1);
    CHECK(decode_to_memory(v1, 1) == original);
    CHECK(decode_to_memory(v1, 3) == original);
    const auto v2 = read_file("mixed.v2-" + c.name + ".huf");
    CHECK(v2[4] == 2);
    CHECK(decode_to_memory(v2, 2) == original);
    for (int t : {1, 2}) CHECK(testing::encode_to_memory(original, c.fh, t) == v2);
  }
  CHECK(decode_to_memory(read_file("empty.v1.huf"), 1).empty());
  CHECK(decode_to_memory(read_file("empty.v2.huf"), 1).empty());
  CHECK(testing::encode_to_memory({}, header(4u << 20), 1) == read_file("empty.v2.huf"));
  // A version this build does not know.
  auto v3 = read_file("mixed.v2-default.huf");
  v3[4] = 3;
  const uint32_t sum = checksum32(v3.data(), 12);
  for (int i = 0; i < 4; ++i) v3[12 + i] = static_cast<uint8_t>(sum >> (8 * i));
  check_error([&] { decode_to_memory(v3, 1); }, ErrorKind::unsupported,
              "huffgpu format version 3 is not supported (this build reads versions 1 to 2)");
}
