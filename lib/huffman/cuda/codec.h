// hpcnn huffman: the CUDA codec (Yamamoto, Nakano et al., "Huffman coding with gap arrays for
// GPU acceleration", ICPP 2020). Same format and same bytes as the CPU codec (cpu/): the code is
// built on the host from the GPU histogram (plan_chunk), the chunk header, code table and
// checksums are written by the shared host code (chunk_plan.h), and the kernels produce the
// bitstream words and the gap array.
//
// Kernels (codec.cu):
//  - byte histogram: shared-memory counts per block, 32-bit wordwise loads;
//  - encode: each thread sums the code lengths of 16 symbols; one kernel computes the prefix sum
//    over the whole chunk with decoupled look-back (tiles numbered by an atomic counter publish
//    their aggregate, then their inclusive prefix, and look back over their predecessors: the
//    paper's single-kernel soft synchronization) and packs the codewords MSB-first into 32-bit
//    words (only words shared with a neighbour thread use atomicOr), writing the gap array in
//    the same pass;
//  - decode with gap arrays: one thread per segment, starting at its gap-array offset, with the
//    4096-entry first-level table in shared memory; symbol counts, one look-back prefix sum for
//    the output positions, then the segment is decoded again and written wordwise;
//  - decode without gap arrays: self-synchronization: every thread starts at its segment's first
//    bit and decodes into the next segment; the boundaries it reaches become the next round's
//    starts until nothing changes, then the same counting/writing kernel runs.
// Transfers use pinned host buffers and two streams (input pieces are uploaded while the
// histogram kernel runs on the previous piece). Memory: buffers for one chunk, bounded by
// `memory_cap` (bytes; 0: no cap) so that inputs larger than the GPU are processed chunk by chunk.
// Errors: ErrorKind::device for CUDA failures (call, file:line, CUDA's message), ErrorKind::
// bad_input for corrupt streams (naming the chunk, byte offset and segment).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "huffman/format.h"

namespace hpcnn::huffman::cuda {

// True when this build has the CUDA codec and a CUDA device is present; otherwise `why` says
// what is missing.
bool available(std::string* why);

struct KernelTimes {
  double kernel_ms = 0;    // histogram + encode, or (sync +) decode kernels
  double transfer_ms = 0;  // host <-> device copies
};

class Codec {
 public:
  explicit Codec(size_t memory_cap = 0);
  ~Codec();
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  // As huffman::encode_chunk (cpu/encoder.h): identical output bytes.
  void encode_chunk(const uint8_t* in, size_t n, const FileHeader& fh, std::vector<uint8_t>& out);
  // As huffman::decode_chunk (cpu/decoder.h); checks the checksum on the host.
  void decode_chunk(const ChunkHeader& h, const uint8_t* chunk, const FileHeader& fh, uint8_t* out, uint64_t index,
                    uint64_t offset);
  const KernelTimes& last_times() const { return times_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  KernelTimes times_;
};

}  // namespace hpcnn::huffman::cuda
