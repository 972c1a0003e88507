// libFuzzer target: encode -> decode of arbitrary bytes with settings taken from the first
// bytes (code limit, segment size, gap array, chunk size, threads) must give the input back.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "huffman/cpu/decoder.h"
#include "huffman/cpu/encoder.h"

using namespace hpcnn::huffman;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  FileHeader fh;
  fh.code_limit = static_cast<uint8_t>(8 + data[0] % 9);
  fh.segment_log2 = data[1] & 1 ? 7 : 8;
  fh.flags = data[1] & 2 ? 0 : kFlagGapArray;
  fh.chunk_size = 1 + (data[2] * 97u) % 4096;
  const int threads = 1 + (data[1] >> 2) % 4;
  data += 3;
  size -= 3;
  std::vector<uint8_t> chunk, out(fh.chunk_size);
  DecoderScratch scratch;
  for (size_t off = 0, i = 0; off < size; off += fh.chunk_size, ++i) {
    const size_t n = std::min<size_t>(fh.chunk_size, size - off);
    encode_chunk(data + off, n, fh, threads, chunk);
    const ChunkHeader h = read_chunk_header(chunk.data(), fh, i, off);
    decode_chunk(h, chunk.data(), fh, threads, out.data(), scratch, i, off);
    for (size_t k = 0; k < n; ++k)
      if (out[k] != data[off + k]) std::abort();
  }
  return 0;
}
