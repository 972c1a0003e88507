// GPU tests of the CUDA codec against the CPU codec (the reference): identical encoded bytes,
// each decoder reading the other's output, the edge cases, and corrupt streams. Without a CUDA
// device the program prints why and exits 77, which ctest reports as skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>

#include "core/error.h"
#include "huffman/cpu/decoder.h"
#include "huffman/cpu/encoder.h"
#include "huffman/cuda/codec.h"
#include "huffman/stream.h"
#include "test_inputs.h"

using namespace hpcnn::huffman;
using testing::header;
using testing::text_like;

TEST_CASE("CUDA encoder writes the CPU encoder's bytes; each decoder reads the other's", "[cuda]") {
  cuda::Codec gpu;
  for (const auto& in : testing::edge_case_inputs())
    for (int limit : {8, 12, 16})
      for (int seg : {7, 8})
        for (bool gaps : {true, false}) {
          const FileHeader fh = header(64u << 20, seg, gaps, limit);
          std::vector<uint8_t> cpu_chunk, gpu_chunk, out(in.size());
          encode_chunk(in.data(), in.size(), fh, 4, cpu_chunk);
          gpu.encode_chunk(in.data(), in.size(), fh, gpu_chunk);
          REQUIRE(gpu_chunk == cpu_chunk);
          const ChunkHeader h = read_chunk_header(cpu_chunk.data(), fh, 0, 16);
          gpu.decode_chunk(h, cpu_chunk.data(), fh, out.data(), 0, 16);
          CHECK(out == in);
          DecoderScratch s;
          decode_chunk(h, gpu_chunk.data(), fh, 2, out.data(), s, 0, 16);
          CHECK(out == in);
        }
}

TEST_CASE("CUDA codec with code blocks: the CPU's bytes and the golden streams of both versions", "[cuda]") {
  // Chunks of several code blocks (format version 2): the encode kernel takes each tile's table
  // from its unit's block, the decode and self-synchronization kernels switch tables at block
  // boundaries. Inputs: text / a narrow band / text / 256 values, and the golden mixed.bin.
  cuda::Codec gpu;
  std::mt19937_64 rng(3);
  std::vector<uint8_t> mixed = text_like(200000, 1);
  for (int i = 0; i < 150000; ++i) mixed.push_back(static_cast<uint8_t>(200 + rng() % 8 + rng() % 8));
  const auto more = text_like(90000, 2);
  mixed.insert(mixed.end(), more.begin(), more.end());
  for (int i = 0; i < 70000; ++i) mixed.push_back(static_cast<uint8_t>(rng() % 256 / (1 + rng() % 4)));
  std::ifstream gf(std::string(HPCNN_TEST_DATA_DIR) + "/huffman_golden/mixed.bin", std::ios::binary);
  const std::vector<uint8_t> golden{std::istreambuf_iterator<char>(gf), std::istreambuf_iterator<char>()};
  REQUIRE(golden.size() == 98304);
  const std::vector<uint8_t>* inputs[] = {&mixed, &golden};
  for (const auto* in : inputs)
    for (int limit : {9, 12, 16})
      for (int seg : {7, 8})
        for (bool gaps : {true, false}) {
          const FileHeader fh = header(64u << 20, seg, gaps, limit);
          std::vector<uint8_t> cpu_chunk, gpu_chunk, out(in->size());
          encode_chunk(in->data(), in->size(), fh, 2, cpu_chunk);
          REQUIRE(read_chunk_header(cpu_chunk.data(), fh, 0, 16).blocks >= 3);
          gpu.encode_chunk(in->data(), in->size(), fh, gpu_chunk);
          REQUIRE(gpu_chunk == cpu_chunk);
          const ChunkHeader h = read_chunk_header(cpu_chunk.data(), fh, 0, 16);
          gpu.decode_chunk(h, cpu_chunk.data(), fh, out.data(), 0, 16);
          CHECK(out == *in);
        }
  // The golden streams (tests/huffman/test_blocks.cpp) through the CUDA decoder, versions 1 and 2.
  auto shared = std::make_shared<cuda::Codec>();
  ChunkCodec codec = cpu_codec(1);
  codec.decode = [shared](const ChunkHeader& h, const uint8_t* chunk, const FileHeader& fh, uint8_t* out, uint64_t index,
                          uint64_t offset) { shared->decode_chunk(h, chunk, fh, out, index, offset); };
  for (const char* name : {"mixed.v1-default.huf", "mixed.v1-nogap-c8k.huf", "mixed.v1-s128-l9-c32k.huf", "mixed.v2-default.huf",
                           "mixed.v2-nogap-c8k.huf", "mixed.v2-s128-l9-c32k.huf"}) {
    std::ifstream f(std::string(HPCNN_TEST_DATA_DIR) + "/huffman_golden/" + name, std::ios::binary);
    const std::vector<uint8_t> stream{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
    testing::MemoryFd fd(stream);
    std::vector<uint8_t> back;
    decode_stream(
        fd.get(), [&](const uint8_t* p, size_t n) { back.insert(back.end(), p, p + n); }, codec);
    INFO(name);
    CHECK(back == golden);
  }
}

TEST_CASE("CUDA decoder: a corrupted chunk of a stream fails naming that chunk", "[cuda]") {
  // As the CPU test "a corrupted chunk of a stream fails naming that chunk" (test_codec.cpp), with
  // decode_stream calling the CUDA decoder for every chunk, as huffgpu-decode --device cuda does:
  // every byte of a chunk is under a check (header XXH32, metadata XXH32, segment ends, symbol
  // count, padding bits, XXH3-64), so every flip in chunk 4 must end in ErrorKind::bad_input
  // naming chunk 4 at a byte offset inside it, never in a decode, and never in an
  // error blamed on a later chunk.
  auto gpu = std::make_shared<cuda::Codec>();
  ChunkCodec codec = cpu_codec(1);
  codec.decode = [gpu](const ChunkHeader& h, const uint8_t* chunk, const FileHeader& fh, uint8_t* out, uint64_t index,
                       uint64_t offset) { gpu->decode_chunk(h, chunk, fh, out, index, offset); };
  const auto in = text_like(350000, 9);
  for (bool gaps : {true, false}) {
    const FileHeader fh = header(60000, 8, gaps);
    const auto stream = testing::encode_to_memory(in, fh, 1);
    const TableEntry c4 = testing::chunk_entry(stream, 4);
    REQUIRE(read_chunk_header(stream.data() + c4.offset, fh, 4, c4.offset).mode == ChunkMode::huffman);
    std::vector<uint8_t> back;
    auto sink = [&](const uint8_t* p, size_t n) { back.insert(back.end(), p, p + n); };
    {
      testing::MemoryFd fd(stream);
      decode_stream(fd.get(), sink, codec);
      REQUIRE(back == in);
    }
    std::mt19937_64 rng(5);
    std::vector<std::pair<size_t, int>> flips;  // (byte within chunk 4, bit)
    for (size_t b = 0; b < kChunkHeaderSize; ++b) flips.emplace_back(b, static_cast<int>(rng() % 8));
    for (int bit = 0; bit < 8; ++bit)
      for (size_t b = 8; b < 12; ++b) flips.emplace_back(b, bit);  // payload length
    for (int k = 0; k < 150; ++k)
      flips.emplace_back(kChunkHeaderSize + rng() % (c4.stored_length - kChunkHeaderSize), static_cast<int>(rng() % 8));
    for (const auto& [b, bit] : flips) {
      auto bad = stream;
      bad[c4.offset + b] ^= static_cast<uint8_t>(1u << bit);
      testing::MemoryFd fd(bad);
      back.clear();
      INFO("bit " << bit << " of byte " << b << " of chunk 4, gap arrays " << gaps);
      const std::string msg = hpcnn::testing::check_error([&] { decode_stream(fd.get(), sink, codec); },
                                                          hpcnn::ErrorKind::bad_input, "in chunk 4 at byte offset ");
      const std::string at = "in chunk 4 at byte offset ";  // the chunk's, its payload's or a code table's
      const uint64_t named = std::stoull(msg.substr(msg.find(at) + at.size()));
      CHECK(named >= c4.offset);
      CHECK(named < c4.offset + c4.stored_length);
      CHECK(back.size() == 4 * 60000u);  // the chunks before, nothing of chunk 4
    }
  }
}

int main(int argc, char** argv) {
  std::string why;
  if (!cuda::available(&why)) {
    std::printf("SKIPPED: no CUDA device: %s\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
