// GPU tests of the CUDA codec against the CPU codec (the reference): identical encoded bytes,
// each decoder reading the other's output, the edge cases, and corrupt streams. Without a CUDA
// device the program prints why and exits 77, which ctest reports as skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <random>

#include "core/error.h"
#include "huffman/cpu/decoder.h"
#include "huffman/cpu/encoder.h"
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

TEST_CASE("CUDA decoder rejects corrupt chunks naming the chunk", "[cuda]") {
  cuda::Codec gpu;
  const auto in = text_like(300000, 9);
  const FileHeader fh = header();
  std::vector<uint8_t> chunk, out(in.size());
  encode_chunk(in.data(), in.size(), fh, 1, chunk);
  std::mt19937_64 rng(5);
  int failures = 0;
  for (int trial = 0; trial < 200; ++trial) {
    auto bad = chunk;
    bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    try {
      const ChunkHeader h = read_chunk_header(bad.data(), fh, 4, 100);
      if (h.payload_length + kChunkHeaderSize != bad.size()) throw hpcnn::Error(hpcnn::ErrorKind::bad_input, "in chunk 4 length");
      gpu.decode_chunk(h, bad.data(), fh, out.data(), 4, 100);
      CHECK(out == in);
    } catch (const hpcnn::Error& e) {
      CHECK(std::string(e.what()).find("chunk 4") != std::string::npos);
      ++failures;
    }
  }
  CHECK(failures > 150);
}

int main(int argc, char** argv) {
  std::string why;
  if (!cuda::available(&why)) {
    std::printf("SKIPPED: no CUDA device: %s\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
