// hpcnn huffman: the table-driven CPU decoder.
//
// A chunk's segments (Yamamoto, Nakano et al., ICPP 2020, Sec. 4) are split into contiguous
// lanes, each starting at its first segment's gap-array offset, in groups of seven decoded
// interleaved by one thread (independent bit buffers, so the table lookups overlap) from a
// byte-swapped copy of the group's words, with a multi-symbol lookup table (up to three
// codewords per lookup). Lanes are sized so that a group's words and output stay in the L2
// cache. Thread 0 takes groups from the front and copies and hashes each group's output in
// place while it is in cache; other threads take groups from the back into scratch, and their
// output is moved into place (and hashed by thread 0, in order) once all counts are known.
// A lane must end exactly where the next lane starts, the symbol count must equal the chunk's
// length and the output must match the chunk's checksum; otherwise ErrorKind::bad_input naming
// the chunk and byte offset. Streams without gap arrays are decoded sequentially, one lane per
// chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "huffman/format.h"

namespace hpcnn::huffman {

struct DecoderScratch {
  std::vector<uint8_t> lanes;  // lane outputs before they are moved into place
};

// Decodes the chunk at `chunk` (its 40-byte header, already parsed into `h`, followed by
// h.payload_length bytes) into out[0 .. h.original_length). `index` and `offset` name the chunk
// in errors. Verifies the checksum.
void decode_chunk(const ChunkHeader& h, const uint8_t* chunk, const FileHeader& fh, int threads, uint8_t* out,
                  DecoderScratch& scratch, uint64_t index, uint64_t offset);

}  // namespace hpcnn::huffman
