// hpcnn huffman: the multi-threaded CPU encoder (the reference for the CUDA encoder).
//
// Per chunk (Yamamoto, Nakano et al., ICPP 2020, Sec. 3): byte histogram (threads over parts of
// the chunk), optimal length-limited canonical code, the bit length of each thread's part from
// its histogram, a prefix sum over the parts, and each thread packing its codewords MSB-first
// into 32-bit words from its bit offset while it records the gap array. The output bytes do not
// depend on the thread count. Incompressible chunks are stored raw; a chunk of one repeated
// byte is stored as that byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "huffman/format.h"

namespace hpcnn::huffman {

// Encodes `n` bytes (1 <= n <= fh.chunk_size) into `out`: chunk header and payload.
void encode_chunk(const uint8_t* in, size_t n, const FileHeader& fh, int threads, std::vector<uint8_t>& out);

// Byte histogram of `n` bytes (four interleaved sub-histograms).
void byte_histogram(const uint8_t* in, size_t n, uint64_t counts[256]);

}  // namespace hpcnn::huffman
