// Build without CUDA: the codec reports that it is not available.
#include "core/error.h"
#include "huffman/cuda/codec.h"

namespace hpcnn::huffman::cuda {

bool available(std::string* why) {
  if (why) *why = "this build has no CUDA codec (configure with the CUDA toolkit present, HPCNN_WITH_CUDA=AUTO or ON)";
  return false;
}

struct Codec::Impl {};

Codec::Codec(size_t) { throw_error(ErrorKind::device, "--device cuda: this build has no CUDA codec"); }
Codec::~Codec() = default;
void Codec::encode_chunk(const uint8_t*, size_t, const FileHeader&, std::vector<uint8_t>&) {}
void Codec::decode_chunk(const ChunkHeader&, const uint8_t*, const FileHeader&, uint8_t*, uint64_t, uint64_t) {}

}  // namespace hpcnn::huffman::cuda
