#include "huffman/codec.h"

#include <memory>

#include "huffman/cuda/codec.h"

namespace hpcnn::huffman {

SelectedCodec select_codec(DeviceChoice choice, int threads, size_t gpu_memory_cap) {
  SelectedCodec s{cpu_codec(threads), "cpu", {}};
  if (choice == DeviceChoice::cpu) return s;
  if (choice == DeviceChoice::automatic && !cuda::available(&s.why)) return s;
  auto gpu = std::make_shared<cuda::Codec>(gpu_memory_cap);  // ErrorKind::device when unusable
  s.codec.encode = [gpu](const uint8_t* in, size_t n, const FileHeader& fh, std::vector<uint8_t>& out) {
    gpu->encode_chunk(in, n, fh, out);
  };
  s.codec.decode = [gpu](const ChunkHeader& h, const uint8_t* chunk, const FileHeader& fh, uint8_t* out, uint64_t index,
                         uint64_t offset) { gpu->decode_chunk(h, chunk, fh, out, index, offset); };
  s.device = "cuda";
  s.why.clear();
  return s;
}

}  // namespace hpcnn::huffman
