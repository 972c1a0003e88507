// hpcnn huffman: the table-driven CPU decoder.
//
// A chunk's segments (Yamamoto, Nakano et al., ICPP 2020, Sec. 4) are split into contiguous
// lanes; each lane starts at its first segment's gap-array offset, and each thread decodes four
// lanes interleaved (independent bit buffers, so the table lookups overlap). A lane must end
// exactly where the next lane starts, the symbol count must equal the chunk's length and the
// output must match the chunk's checksum; otherwise ErrorKind::bad_input naming the chunk and
// byte offset. Streams without gap arrays are decoded sequentially, one lane per chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "huffman/format.h"

namespace hpcnn::huffman {

struct DecoderScratch {
  std::vector<uint8_t> lanes;       // per-lane output before compaction
  std::vector<uint32_t> words;      // bitstream copy with zero padding
};

// Decodes the chunk at `chunk` (its 32-byte header, already parsed into `h`, followed by
// h.payload_length bytes) into out[0 .. h.original_length). `index` and `offset` name the chunk
// in errors. Verifies the checksum.
void decode_chunk(const ChunkHeader& h, const uint8_t* chunk, const FileHeader& fh, int threads, uint8_t* out,
                  DecoderScratch& scratch, uint64_t index, uint64_t offset);

}  // namespace hpcnn::huffman
