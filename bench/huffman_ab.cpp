// In-process A/B of two versions of the huffgpu CPU encoder and decoder (bench/ab_huffman.sh
// builds it): A's and B's lib/huffman/cpu/encoder.cpp and decoder.cpp are compiled with their
// entry points renamed (encode_chunk_A / _B, decode_chunk_A / _B) and linked into this one
// program with everything else from today's library, and runs alternate A, B, A, B, ... in one
// process. On a shared VM whose speed drifts by 10-25% for seconds at a time, two builds timed
// in separate runs differ by more than most changes; alternating pairs in one process see the
// same machine. The decoders decode the same encoded chunks (today's encoder).
// usage: huffman_ab enc|dec PAIRS FILE...   (one thread, default header: 4 MiB chunks, S = 256,
//        L = 12; HUFFMAN_AB_NO_GAP_ARRAY=1: without gap arrays; HUFFMAN_AB_NO_QUAD=1: A and B with
//        the AVX-512 quad packer off (the scalar packers, as on CPUs without AVX-512 VBMI);
//        HUFFMAN_AB_B_NO_QUAD=1: B only, to compare the two packing paths on one CPU)
// Prints per file A's and B's best MB/s of original data, best B/A and the median of the pairs'
// B/A ratios (above 1: B faster); exits 1 when A and B write different bytes or a decoder
// returns other bytes than the input.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "huffman/cpu/decoder.h"
#include "huffman/cpu/encoder.h"
#include "huffman/format.h"

namespace hpcnn::huffman {
void encode_chunk_A(const uint8_t* in, size_t n, const FileHeader& fh, int threads, std::vector<uint8_t>& out);
void encode_chunk_B(const uint8_t* in, size_t n, const FileHeader& fh, int threads, std::vector<uint8_t>& out);
void decode_chunk_A(const ChunkHeader& h, const uint8_t* chunk, const FileHeader& fh, int threads, uint8_t* out,
                    DecoderScratch& scratch, uint64_t index, uint64_t offset);
void decode_chunk_B(const ChunkHeader& h, const uint8_t* chunk, const FileHeader& fh, int threads, uint8_t* out,
                    DecoderScratch& scratch, uint64_t index, uint64_t offset);
void set_quad_pack_enabled_B(bool enabled);
__attribute__((weak)) void set_quad_pack_enabled_A(bool enabled);  // absent where A predates quad_pack.cpp
}  // namespace hpcnn::huffman

using namespace hpcnn::huffman;
using Clock = std::chrono::steady_clock;

namespace {

using Chunks = std::vector<std::vector<uint8_t>>;
using EncodeFn = decltype(&encode_chunk_A);
using DecodeFn = decltype(&decode_chunk_A);

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double encode_all(EncodeFn fn, const std::vector<uint8_t>& in, const FileHeader& fh, Chunks& out) {
  const auto t0 = Clock::now();
  out.resize((in.size() + fh.chunk_size - 1) / fh.chunk_size);
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t off = i * fh.chunk_size;
    fn(in.data() + off, std::min<size_t>(fh.chunk_size, in.size() - off), fh, 1, out[i]);
  }
  return seconds_since(t0);
}

double decode_all(DecodeFn fn, const Chunks& chunks, const FileHeader& fh, std::vector<uint8_t>& out, DecoderScratch& scratch) {
  const auto t0 = Clock::now();
  size_t off = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkHeader h = read_chunk_header(chunks[i].data(), fh, i, 0);
    fn(h, chunks[i].data(), fh, 1, out.data() + off, scratch, i, 0);
    off += h.original_length;
  }
  return seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || (std::strcmp(argv[1], "enc") != 0 && std::strcmp(argv[1], "dec") != 0) || std::atoi(argv[2]) < 1) {
    std::fprintf(stderr, "usage: huffman_ab enc|dec PAIRS FILE...\n");
    return 2;
  }
  const bool enc = std::strcmp(argv[1], "enc") == 0;
  const int pairs = std::atoi(argv[2]);
  FileHeader fh;
  const auto env_on = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v == '1';
  };
  if (env_on("HUFFMAN_AB_NO_QUAD") || env_on("HUFFMAN_AB_B_NO_QUAD")) set_quad_pack_enabled_B(false);
  if (env_on("HUFFMAN_AB_NO_QUAD") && set_quad_pack_enabled_A) set_quad_pack_enabled_A(false);
  if (env_on("HUFFMAN_AB_NO_GAP_ARRAY")) fh.flags = 0;
  int status = 0;
  for (int a = 3; a < argc; ++a) {
    std::ifstream f(argv[a], std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "huffman_ab: cannot read %s\n", argv[a]);
      return 2;
    }
    const std::vector<uint8_t> in{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
    if (in.empty()) {
      std::fprintf(stderr, "huffman_ab: %s is empty\n", argv[a]);
      return 2;
    }
    Chunks ca, cb;
    encode_all(encode_chunk_A, in, fh, ca);
    encode_all(encode_chunk_B, in, fh, cb);
    if (ca != cb) {
      std::printf("%s: A and B write different bytes\n", argv[a]);
      status = 1;
    }
    std::vector<uint8_t> oa(in.size()), ob(in.size());
    DecoderScratch sa, sb;
    decode_all(decode_chunk_A, cb, fh, oa, sa);
    decode_all(decode_chunk_B, cb, fh, ob, sb);
    if (oa != in || ob != in) {
      std::printf("%s: a decoder returned other bytes than the input (A %s, B %s)\n", argv[a], oa == in ? "ok" : "wrong",
                  ob == in ? "ok" : "wrong");
      status = 1;
    }
    double best_a = 1e30, best_b = 1e30;
    std::vector<double> ratios;
    for (int k = 0; k < pairs; ++k) {
      const double ta = enc ? encode_all(encode_chunk_A, in, fh, ca) : decode_all(decode_chunk_A, cb, fh, oa, sa);
      const double tb = enc ? encode_all(encode_chunk_B, in, fh, cb) : decode_all(decode_chunk_B, cb, fh, ob, sb);
      best_a = std::min(best_a, ta);
      best_b = std::min(best_b, tb);
      ratios.push_back(ta / tb);
    }
    std::sort(ratios.begin(), ratios.end());
    const double median =
        ratios.size() % 2 ? ratios[ratios.size() / 2] : (ratios[ratios.size() / 2 - 1] + ratios[ratios.size() / 2]) / 2;
    const char* name = std::strrchr(argv[a], '/') ? std::strrchr(argv[a], '/') + 1 : argv[a];
    std::printf("%-28s %s  A %6.0f MB/s  B %6.0f MB/s  best B/A %.3f  median of %d pairs B/A %.3f\n", name,
                enc ? "encode" : "decode", in.size() / best_a / 1e6, in.size() / best_b / 1e6, best_a / best_b, pairs, median);
  }
  return status;
}
