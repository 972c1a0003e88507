// GPU tests of the CUDA codec against the CPU codec (the reference): identical encoded bytes,
// each decoder reading the other's output, the edge cases, and corrupt streams. Without a CUDA
// device the program prints why and exits 77, which ctest reports as skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <memory>
#include <random>

#include "core/error.h"
#include "huffman/cpu/decoder.h"
#include "huffman/cpu/encoder.h"
#include "huffman/stream.h"
#include "huffman/cuda/codec.h"
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

TEST_CASE("CUDA decoder: a corrupted chunk of a stream fails naming that chunk", "[cuda]") {
  // As the CPU test "a corrupted chunk of a stream fails naming that chunk" (test_codec.cpp), with
  // decode_stream calling the CUDA decoder for every chunk, as huffgpu-decode --device cuda does:
  // every byte of a chunk is under a check (header XXH32, metadata XXH32, segment ends, symbol
  // count, padding bits, XXH3-64), so every flip in chunk 4 must end in ErrorKind::bad_input
  // naming chunk 4 at its header's or payload's byte offset, never in a decode, and never in an
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
    for (int k = 0; k < 150; ++k) flips.emplace_back(kChunkHeaderSize + rng() % (c4.stored_length - kChunkHeaderSize), static_cast<int>(rng() % 8));
    for (const auto& [b, bit] : flips) {
      auto bad = stream;
      bad[c4.offset + b] ^= static_cast<uint8_t>(1u << bit);
      testing::MemoryFd fd(bad);
      back.clear();
      INFO("bit " << bit << " of byte " << b << " of chunk 4, gap arrays " << gaps);
      const std::string msg =
          hpcnn::testing::check_error([&] { decode_stream(fd.get(), sink, codec); }, hpcnn::ErrorKind::bad_input, "in chunk 4 at byte offset ");
      CHECK((msg.find(chunk_where(4, c4.offset)) != std::string::npos ||
             msg.find(chunk_where(4, c4.offset + kChunkHeaderSize)) != std::string::npos));
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
