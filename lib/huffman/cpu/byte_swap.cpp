#include "huffman/cpu/byte_swap.h"

#include <cstring>

#include "huffman/cpu/hot.h"

namespace hpcnn::huffman {

HPCNN_VECTOR_TARGET void swap_words(const uint8_t* __restrict src, size_t n, uint32_t* __restrict dst) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t v;
    std::memcpy(&v, src + 4 * i, 4);
    dst[i] = __builtin_bswap32(v);
  }
}

HPCNN_WIDE_VECTOR_TARGET void swap_words_in_place(uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t v;
    std::memcpy(&v, p + 4 * i, 4);
    v = __builtin_bswap32(v);
    std::memcpy(p + 4 * i, &v, 4);
  }
}

}  // namespace hpcnn::huffman
