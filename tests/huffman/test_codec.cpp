#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "core/error.h"
#include "huffman/bitstream.h"
#include "huffman/chunk_plan.h"
#include "huffman/codebook.h"
#include "huffman/cpu/decoder.h"
#include "huffman/cpu/encoder.h"
#include "huffman/cpu/quad_pack.h"
#include "huffman/format.h"
#include "huffman/stream.h"
#include "test_inputs.h"

using namespace hpcnn::huffman;
using hpcnn::ErrorKind;
using hpcnn::testing::check_error;
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

TEST_CASE("parts of every size and thread count give the one-thread bytes", "[huffman]") {
  // Part boundaries land at every offset within a byte, a word and a gap-array segment,
  // including inside a codeword that crosses a segment boundary (that entry belongs to the part
  // before). Every encoder path: pair table (text), four or three single lookups per flush (many
  // symbols, codes up to 14 or 16 bits).
  std::mt19937_64 rng(21);
  std::vector<uint8_t> wide(400000);
  for (auto& b : wide) b = static_cast<uint8_t>(std::min<uint64_t>(255, rng() % 64 + rng() % 64 + rng() % 160));
  for (const auto& src : {text_like(400000, 13), wide}) {
    for (size_t n = 40000; n <= src.size(); n += 17389) {
      const std::vector<uint8_t> in(src.begin(), src.begin() + static_cast<long>(n));
      for (int seg : {7, 8})
        for (int limit : {12, 14, 16}) {  // 14 and 16: long codewords right after a part's first byte
          std::vector<uint8_t> ref, got;
          REQUIRE(roundtrip(in, header(1u << 24, seg, true, limit), 1, 1, &ref) == in);
          for (int t : {2, 3, 7}) {
            CHECK(roundtrip(in, header(1u << 24, seg, true, limit), t, t, &got) == in);
            CHECK(got == ref);
          }
        }
    }
  }
}

TEST_CASE("byte_histogram counts every byte, past what one 16-bit sub-histogram counter holds", "[huffman]") {
  // 3 MiB: a run of 1.5 MiB of one value (2^17 per sub-histogram, twice a 16-bit counter), text,
  // and an odd tail; counted against a plain loop.
  std::vector<uint8_t> in(3u << 20, 200);
  const auto text = text_like(1u << 20, 3);
  std::copy(text.begin(), text.end(), in.begin() + (3u << 19));
  for (size_t i = in.size() - 1001; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 37);
  for (size_t n : {in.size(), in.size() - 7, size_t{15}}) {
    uint64_t got[256] = {}, want[256] = {};
    byte_histogram(in.data(), n, got);
    for (size_t i = 0; i < n; ++i) ++want[in[i]];
    CHECK(std::equal(got, got + 256, want));
  }
}

TEST_CASE("UnitCounter counts every unit exactly, with and without taking frequent values out", "[huffman]") {
  // Units of different kinds one after the other, so that the values taken out of a unit (the
  // previous unit's most frequent) are sometimes frequent in it and sometimes absent, and the
  // number of them changes (one for a unit of one value, up to four for text, none for even
  // bytes): each count against a plain loop, on every path this CPU has (AVX-512 VBMI2, AVX2,
  // scalar); lengths from 0 to the largest unit, not multiples of 32 or 64 too.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
  __builtin_cpu_init();
  // The fast paths must not quietly fall away on a CPU that has them.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi2"))
    REQUIRE(value_takeout_path() == TakeoutPath::avx512);
  else if (__builtin_cpu_supports("avx2"))
    REQUIRE(value_takeout_path() == TakeoutPath::avx2);
#endif
  std::mt19937_64 rng(65);
  const auto text = text_like(1u << 20, 5);
  std::vector<std::vector<uint8_t>> units;
  for (int u = 0; u < 120; ++u) {
    const size_t n = u % 11 == 3 ? rng() % 200 : u % 13 == 5 ? UnitCounter::kMaxUnit : 16384 - (u % 5 == 0 ? rng() % 1000 : 0);
    std::vector<uint8_t> v(n);
    switch (u % 6) {
      case 0:
        std::copy(text.begin() + static_cast<long>(u * 1000), text.begin() + static_cast<long>(u * 1000 + n), v.begin());
        break;
      case 1:
        for (auto& b : v) b = rng() % 2 ? 0 : static_cast<uint8_t>(rng());
        break;  // half zeros
      case 2:
        for (auto& b : v) b = static_cast<uint8_t>(rng());
        break;  // even
      case 3:
        std::fill(v.begin(), v.end(), static_cast<uint8_t>(u));
        break;  // one value
      case 4:
        for (auto& b : v) b = static_cast<uint8_t>(rng() % 3 * 7);
        break;  // three values
      default:
        for (size_t i = 0; i < n; ++i) v[i] = text[i % 1000];
        break;
    }
    units.push_back(std::move(v));
  }
  const TakeoutPath best = value_takeout_path();
  for (TakeoutPath limit : {TakeoutPath::avx512, TakeoutPath::avx2, TakeoutPath::scalar}) {
    if (limit > best) continue;
    set_value_takeout_limit(limit);
    REQUIRE(value_takeout_path() == limit);
    UnitCounter counter;
    for (size_t u = 0; u < units.size(); ++u) {
      INFO("path " << static_cast<int>(limit) << ", unit " << u << " of " << units[u].size() << " bytes");
      uint64_t got[256], want[256] = {};
      std::fill(got, got + 256, 12345);  // count() sets every entry
      counter.count(units[u].data(), units[u].size(), got);
      for (uint8_t b : units[u]) ++want[b];
      CHECK(std::equal(got, got + 256, want));
    }
    set_value_takeout_limit(TakeoutPath::avx512);
  }
  std::vector<uint8_t> big(UnitCounter::kMaxUnit + 1);
  uint64_t counts[256];
  check_error([&] { UnitCounter().count(big.data(), big.size(), counts); }, ErrorKind::usage, "at most 65535 bytes");
}

TEST_CASE("the AVX-512 quad packer writes the scalar packers' bytes", "[huffman]") {
  // Where the CPU has AVX-512 VBMI, blocks with codes of at most 12 bits are packed by
  // pack_quads() (lookups in vector registers, gap entries from vector prefix sums); the scalar
  // pair-table and single-lookup packers are the reference. Inputs: text (pairs), many symbols
  // (single lookups), a block boundary mix, lengths that are no multiple of 64 and parts that
  // start anywhere in a byte and a segment; S = 128 and 256, with and without gap arrays, L = 9
  // and 12 (L = 16: codes over 12 bits stay scalar in both).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi"))
    REQUIRE(quad_pack_available());  // the fast path must not quietly fall away on a CPU that has it
#endif
  if (quad_pack_available()) {
    QuadTables t;
    std::array<uint32_t, 256> enc{};
    enc['a'] = 0 | 1u << 24;
    enc['b'] = 1 | 1u << 24;
    make_quad_tables(enc, t);
    std::vector<uint8_t> in(2112, 'a'), out(2112);
    for (size_t n : {size_t{0}, size_t{65}, size_t{2112}}) {
      QuadStream st{0, 0, out.data()};
      check_error([&] { pack_quads(in.data(), n, t, st); }, ErrorKind::usage, "positive multiple of 64, at most 2048");
    }
  }
  std::mt19937_64 rng(31);
  std::vector<uint8_t> wide(300001), mix;
  for (auto& b : wide) b = static_cast<uint8_t>(std::min<uint64_t>(255, rng() % 64 + rng() % 64 + rng() % 160));
  const auto text = text_like(250000, 17);
  mix.insert(mix.end(), text.begin(), text.begin() + 70000);
  mix.insert(mix.end(), wide.begin(), wide.begin() + 90001);
  mix.insert(mix.end(), 40000, 0);
  mix.insert(mix.end(), text.begin(), text.begin() + 33333);
  std::vector<uint8_t> shifted(100000);  // two symbols: 1- and 2-bit codes, boundaries in every quad position
  for (auto& b : shifted) b = rng() % 3 ? 'a' : 'b';
  for (const std::vector<uint8_t>* src : std::initializer_list<const std::vector<uint8_t>*>{&text, &wide, &mix, &shifted})
    for (size_t n : {src->size(), src->size() - 37, size_t{64 * 1000 + 5}})
      for (int seg : {7, 8})
        for (bool gaps : {true, false})
          for (int limit : {9, 12, 16})
            for (int t : {1, 3}) {
              INFO("input " << (src == &text   ? "text"
                                : src == &wide ? "wide"
                                : src == &mix  ? "mix"
                                               : "two symbols")
                            << ", n " << n << ", S 2^" << seg << ", gaps " << gaps << ", L " << limit << ", threads " << t);
              const std::vector<uint8_t> in(src->begin(), src->begin() + static_cast<long>(n));
              const FileHeader fh = header(1u << 24, seg, gaps, limit);
              std::vector<uint8_t> vec, scalar;
              CHECK(roundtrip(in, fh, t, t, &vec) == in);
              set_quad_pack_enabled(false);
              CHECK(roundtrip(in, fh, t, t, &scalar) == in);
              set_quad_pack_enabled(true);
              CHECK(vec == scalar);
            }
}

TEST_CASE("the quad packer's octet flushes at their limit: octets of 57 and 58 bits after 0-7 pending bits", "[huffman]") {
  // pack_quads() flushes two quads at once (an octet) when every octet of a 64-byte group fits
  // the accumulator with the pending bits (at most 7 + 57), else the group's sixteen quads. A
  // 7-bit and an 8-bit codeword make octets of exactly 57 (7 + 1) and 58 (6 + 2) bits; groups of
  // only 57-bit octets, with one 58-bit octet, and mixed, after every count of pending bits, are
  // checked against bit-by-bit packing.
  if (!quad_pack_available()) return;  // the CPU has no AVX-512 VBMI (the test above requires it where it has)
  std::array<uint32_t, 256> enc{};
  enc['a'] = 0x55u | 7u << 24;
  enc['b'] = 0xB3u | 8u << 24;
  QuadTables t;
  make_quad_tables(enc, t);
  std::mt19937_64 rng(57);
  std::vector<uint8_t> in;
  for (int g = 0; g < 64; ++g)  // two calls of 2048 symbols
    for (int o = 0; o < 8; ++o) {
      const bool long_octet = g % 4 == 1 ? o == static_cast<int>(rng() % 8) : g % 4 == 2 ? rng() % 2 == 0 : g % 4 == 3;
      uint8_t oct[8] = {'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a'};
      oct[rng() % 8] = 'b';
      if (long_octet) {
        size_t k = rng() % 8;
        while (oct[k] == 'b') k = (k + 1) % 8;
        oct[k] = 'b';
      }
      in.insert(in.end(), oct, oct + 8);
    }
  for (size_t at = 0; at < in.size(); at += 2048)
    for (uint32_t pending = 0; pending < 8; ++pending) {
      INFO("pending " << pending << ", symbols from " << at);
      const uint64_t acc0 = rng() & ((uint64_t{1} << pending) - 1);
      std::vector<uint8_t> want, got(2048 + 64, 0);
      uint64_t bits = acc0;  // reference: whole bytes to want, the rest in bits / nbits
      uint32_t nbits = pending;
      for (size_t i = at; i < at + 2048; ++i) {
        const uint32_t e = enc[in[i]], len = e >> 24;
        for (uint32_t b = len; b-- > 0;) {
          bits = bits << 1 | ((e >> b) & 1);
          if (++nbits == 8) {
            want.push_back(static_cast<uint8_t>(bits));
            bits = nbits = 0;
          }
        }
      }
      QuadStream st{acc0, pending, got.data()};
      pack_quads(in.data() + at, 2048, t, st);
      REQUIRE(static_cast<size_t>(st.o - got.data()) == want.size());
      CHECK(std::equal(want.begin(), want.end(), got.begin()));
      CHECK(st.nacc == nbits);
      CHECK((st.acc & ((uint64_t{1} << st.nacc) - 1)) == bits);
    }
}

TEST_CASE("a part that starts inside a byte with a run of the longest codewords", "[huffman]") {
  // 190 common symbols, half of the input one of them (no pair table), and 10 rare ones placed
  // only at the part boundaries, so each part begins with codewords of the limit's length after
  // its shared first byte; a varying prefix moves the parts' first bit through every offset
  // within a byte.
  std::mt19937_64 rng(29);
  const size_t n = 64 << 10;  // two threads: four parts, boundaries at n/4, n/2, 3n/4
  for (int limit : {14, 16})
    for (int shift = 0; shift < 24; ++shift) {
      std::vector<uint8_t> in(n);
      for (auto& b : in) b = static_cast<uint8_t>(rng() % 2 ? 0 : rng() % 190);  // rare ones: 13-14 bits at L = 14
      for (int k = 0; k < shift; ++k) in[static_cast<size_t>(k)] = 0;
      for (int q = 1; q < 4; ++q)
        for (int k = 0; k < 8; ++k)
          in[n * static_cast<size_t>(q) / 4 + static_cast<size_t>(k)] = static_cast<uint8_t>(246 + (k + q) % 10);
      std::vector<uint8_t> ref, got;
      REQUIRE(roundtrip(in, header(1u << 24, 8, true, limit), 1, 1, &ref) == in);
      CHECK(roundtrip(in, header(1u << 24, 8, true, limit), 2, 2, &got) == in);
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
  for (int seg : {7, 8})
    for (int threads : {1, 2, 3, 5, 8})
      for (size_t n : {size_t{1500007}, size_t{65537 + 4099 * static_cast<size_t>(threads)}}) {
        const auto in = text_like(n, 4 + static_cast<uint64_t>(threads));
        const FileHeader fh = header(1u << 24, seg);
        std::vector<uint8_t> chunk;
        roundtrip(in, fh, threads, 1, &chunk);
        const ChunkHeader h = read_chunk_header(chunk.data(), fh, 0, 0);
        size_t table_size = 0;
        const auto blocks = read_code_blocks(h, chunk.data() + kChunkHeaderSize, h.payload_length, fh, &table_size, 0, 0);
        const PayloadLayout lay = huffman_layout(table_size, h.bit_length, fh);
        // Independent walk: codeword starts from the symbol lengths (each byte's block's code).
        std::vector<uint64_t> starts;
        uint64_t p = 0;
        size_t blk = 0;
        for (size_t i = 0; i < in.size(); ++i) {
          while (i >= blocks[blk].out_begin + blocks[blk].length) ++blk;
          starts.push_back(p);
          p += blocks[blk].lengths[in[i]];
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

TEST_CASE("a corrupted chunk of a stream fails naming that chunk, through decode_stream", "[huffman]") {
  // Six chunks written by encode_stream; bits flipped in chunk 3 (every byte of its header, every
  // bit of its payload-length field, random payload bytes) and the whole stream read back by
  // decode_stream, as huffgpu-decode reads it. Every byte of a chunk is under a check: the 40-byte
  // header under its XXH32, so a flipped length field is caught in chunk 3 itself and can never
  // shift the framing onto the bytes of later chunks; the code table, gap array and their padding
  // under the metadata XXH32; the bitstream by the lane ends, the symbol count, the zero padding
  // bits and the chunk's XXH3-64. So no flip may decode (not even to the original bytes), and each
  // must end in ErrorKind::bad_input naming chunk 3 and a byte offset inside it (the header's, the
  // payload's or a code table's); chunks 0-2 are decoded first. Chunks of 20,000 bytes are read,
  // decoded and written one after another; chunks of 64 KiB in overlap (the next read while one
  // is decoded, the previous written), which must not change what is reported or written.
  const uint32_t chunk = GENERATE(20000u, 65536u);
  INFO("chunk size " << chunk);
  const auto in = text_like(5 * chunk + chunk / 2, 7);
  const FileHeader fh = header(chunk);
  const auto stream = testing::encode_to_memory(in, fh, 2);
  const TableEntry c3 = testing::chunk_entry(stream, 3);
  REQUIRE(testing::chunk_entry(stream, 5).original_length == chunk / 2);
  REQUIRE(read_chunk_header(stream.data() + c3.offset, fh, 3, c3.offset).mode == ChunkMode::huffman);
  std::vector<uint8_t> back;
  auto sink = [&](const uint8_t* p, size_t n) { back.insert(back.end(), p, p + n); };
  {
    testing::MemoryFd fd(stream);
    decode_stream(fd.get(), sink, 2);
    REQUIRE(back == in);
  }
  std::mt19937_64 rng(11);
  std::vector<std::pair<size_t, int>> flips;  // (byte within chunk 3, bit)
  for (size_t b = 0; b < kChunkHeaderSize; ++b) flips.emplace_back(b, static_cast<int>(rng() % 8));
  for (int bit = 0; bit < 8; ++bit)
    for (size_t b = 8; b < 12; ++b) flips.emplace_back(b, bit);  // payload length
  for (int k = 0; k < 200; ++k)
    flips.emplace_back(kChunkHeaderSize + rng() % (c3.stored_length - kChunkHeaderSize), static_cast<int>(rng() % 8));
  for (const auto& [b, bit] : flips) {
    auto bad = stream;
    bad[c3.offset + b] ^= static_cast<uint8_t>(1u << bit);
    testing::MemoryFd fd(bad);
    back.clear();
    INFO("bit " << bit << " of byte " << b << " of chunk 3");
    const std::string msg =
        check_error([&] { decode_stream(fd.get(), sink, 2); }, ErrorKind::bad_input, "in chunk 3 at byte offset ");
    // The offset named is the chunk's, its payload's or a code table's inside it.
    const std::string at = "in chunk 3 at byte offset ";
    const uint64_t named = std::stoull(msg.substr(msg.find(at) + at.size()));
    CHECK(named >= c3.offset);
    CHECK(named < c3.offset + c3.stored_length);
    CHECK(back.size() == 3 * chunk);  // the chunks before, nothing of chunk 3
  }
}

TEST_CASE("a sink that fails stops encode_stream and decode_stream with its error, in overlap or not", "[huffman]") {
  // 64 KiB chunks: the writer thread calls the sink while the next chunk is coded; 20,000 bytes:
  // one step after the other. The sink's exception (a write error) reaches the caller; no later
  // chunk is handed to the sink.
  const uint32_t chunk = GENERATE(20000u, 65536u);
  INFO("chunk size " << chunk);
  const auto in = text_like(6 * chunk, 3);
  const FileHeader fh = header(chunk);
  const auto stream = testing::encode_to_memory(in, fh, 1);
  for (const bool encode : {true, false}) {
    INFO((encode ? "encode_stream" : "decode_stream"));
    int calls = 0;
    auto sink = [&](const uint8_t*, size_t) {
      if (++calls == 3) hpcnn::throw_error(ErrorKind::io, "write error: test sink");
    };
    testing::MemoryFd fd(encode ? in : stream);
    check_error([&] { encode ? (void)encode_stream(fd.get(), sink, fh, 1) : (void)decode_stream(fd.get(), sink, 1); },
                ErrorKind::io, "test sink");
    CHECK(calls == 3);
  }
}

TEST_CASE("a Huffman chunk header whose payload cannot hold its bitstream is refused", "[huffman]") {
  // Refused before a reader sizes its output by the original length (memory follows the data).
  ChunkHeader h;
  h.original_length = 1000;
  h.bit_length = 4001;  // 126 words
  h.payload_length = 503;
  h.blocks = 1;
  uint8_t b[kChunkHeaderSize];
  write_chunk_header(h, b);
  check_error([&] { read_chunk_header(b, header(), 2, 99); }, ErrorKind::bad_input,
              "payload length 503 too short for 4001 bits in chunk 2 at byte offset 99");
  h.payload_length = 504;
  write_chunk_header(h, b);
  CHECK(read_chunk_header(b, header(), 2, 99).payload_length == 504);
}

TEST_CASE("multi-group decoding: every thread count, and corruption anywhere is caught", "[huffman]") {
  // Over 8 MiB of stream bits: dozens of lane groups, so thread 0's in-place run and the other
  // threads' scratch runs are both exercised.
  const auto in = text_like(3 << 20, 17);
  const FileHeader fh = header();
  std::vector<uint8_t> chunk;
  REQUIRE(roundtrip(in, fh, 2, 1, &chunk) == in);
  const ChunkHeader h = read_chunk_header(chunk.data(), fh, 0, 0);
  DecoderScratch s;
  std::vector<uint8_t> out(in.size());
  for (int t : {2, 3, 4, 7, 16}) {
    std::fill(out.begin(), out.end(), 0);
    decode_chunk(h, chunk.data(), fh, t, out.data(), s, 0, 0);
    CHECK(out == in);
  }
  std::mt19937_64 rng(23);
  const size_t words_start = chunk.size() - (h.bit_length + 31) / 32 * 4;
  for (int trial = 0; trial < 24; ++trial) {
    auto bad = chunk;
    // Flip a bit early, in the middle or late in the bitstream (thread 0's run or a later one).
    const size_t span = bad.size() - words_start;
    const size_t pos = words_start + (trial % 3) * span / 3 + rng() % (span / 3);
    bad[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
    for (int t : {1, 3}) {
      INFO("a flipped bitstream bit at " << pos << ", " << t << " threads");
      check_error([&] { decode_chunk(h, bad.data(), fh, t, out.data(), s, 5, 77); }, ErrorKind::bad_input,
                  "in chunk 5 at byte offset 77");
    }
  }
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
