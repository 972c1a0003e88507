// hpcnn huffman: the multi-threaded CPU encoder (the reference for the CUDA encoder).
//
// Per chunk (Yamamoto, Nakano et al., ICPP 2020, Sec. 3): byte histogram (per 16 KiB unit,
// byte_count.h, hashed in the same pass on one thread), code blocks and their optimal
// length-limited canonical codes (chunk_plan.h), the bit length of each part from its units'
// histograms, a prefix sum over the parts, and the parts packed in parallel (a few per thread,
// taken dynamically), each from its bit offset. Packing combines four codewords (eight where
// they fit) per 64-bit flush (for codes of at most 12 bits: AVX-512 vector lookups, pack_quads()
// in quad_pack.h, where the CPU has AVX-512 VBMI, else two pair-table lookups) into a
// big-endian byte stream that becomes the format's MSB-first 32-bit words in place, and records
// the gap array without branching on segment boundaries. The output bytes do not depend on the
// thread count. Incompressible chunks are stored raw; a chunk of one repeated byte is stored as
// that byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "huffman/cpu/byte_count.h"  // byte_histogram()
#include "huffman/format.h"

namespace hpcnn::huffman {

// Encodes `n` bytes (1 <= n <= fh.chunk_size) into `out`: chunk header and payload.
void encode_chunk(const uint8_t* in, size_t n, const FileHeader& fh, int threads, std::vector<uint8_t>& out);

}  // namespace hpcnn::huffman
