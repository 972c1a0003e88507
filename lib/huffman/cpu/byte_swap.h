// hpcnn huffman: byte swaps between the format's little-endian 32-bit words (FORMAT.md
// "Bitstream") and the big-endian byte stream the CPU codec packs and unpacks (any bit position
// one unaligned 64-bit load away). Vectorized loops (an AVX2 clone beside the baseline): a pass
// at memory speed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hpcnn::huffman {

// dst[i] = the 32-bit word at src + 4i, bytes reversed, for i < n. src and dst must not overlap.
void swap_words(const uint8_t* src, size_t n, uint32_t* dst);

// The n 32-bit words at p, bytes reversed in place.
void swap_words_in_place(uint8_t* p, size_t n);

}  // namespace hpcnn::huffman
