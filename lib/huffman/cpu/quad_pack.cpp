#include "huffman/cpu/quad_pack.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__)
#define HPCNN_QUAD_PACK 1
#include <immintrin.h>
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined operands
// (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace hpcnn::huffman {
namespace {

std::atomic<bool> g_enabled{true};

#if defined(HPCNN_QUAD_PACK)
bool cpu_has_quad_pack() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi");
}
const bool kCpuHasQuadPack = cpu_has_quad_pack();
#else
const bool kCpuHasQuadPack = false;
#endif

}  // namespace

bool quad_pack_available() { return kCpuHasQuadPack && g_enabled.load(std::memory_order_relaxed); }
void set_quad_pack_enabled(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }

void make_quad_tables(const std::array<uint32_t, 256>& enc, QuadTables& t) {
  for (int s = 0; s < 256; ++s) {
    const uint32_t e = (enc[s] & 0xFFF) << 4 | enc[s] >> 24;
    t.lo[s] = static_cast<uint8_t>(e);
    t.hi[s] = static_cast<uint8_t>(e >> 8);
  }
}

#if defined(HPCNN_QUAD_PACK)
namespace {
// vpermt2b indices that interleave the low and high bytes of 32 entries in input order: byte 2i
// from lo (index i), byte 2i+1 from hi (index 64 + i); the second half starts at entry 32.
struct InterleaveIndex {
  alignas(64) uint8_t v[2][64];
  constexpr InterleaveIndex() : v{} {
    for (int i = 0; i < 32; ++i) {
      v[0][2 * i] = static_cast<uint8_t>(i);
      v[0][2 * i + 1] = static_cast<uint8_t>(64 + i);
      v[1][2 * i] = static_cast<uint8_t>(32 + i);
      v[1][2 * i + 1] = static_cast<uint8_t>(96 + i);
    }
  }
};
constexpr InterleaveIndex kInterleaveIndex;
constexpr const auto& kInterleave = kInterleaveIndex.v;
constexpr size_t kMaxSymbols = 2048;
}  // namespace

__attribute__((target("avx512f,avx512bw,avx512vbmi,bmi2"))) uint64_t pack_quads(const uint8_t* in, size_t n, const QuadTables& t,
                                                                                QuadStream& st, uint8_t* gaps, uint32_t offset,
                                                                                uint32_t segment_log2) {
  if (n == 0 || n % 64 != 0 || n > kMaxSymbols)
    throw_error(ErrorKind::usage, "pack_quads: n must be a positive multiple of 64, at most 2048");
  const __m512i lo0 = _mm512_load_si512(t.lo), lo1 = _mm512_load_si512(t.lo + 64);
  const __m512i lo2 = _mm512_load_si512(t.lo + 128), lo3 = _mm512_load_si512(t.lo + 192);
  const __m512i hi0 = _mm512_load_si512(t.hi), hi1 = _mm512_load_si512(t.hi + 64);
  const __m512i hi2 = _mm512_load_si512(t.hi + 128), hi3 = _mm512_load_si512(t.hi + 192);
  const __m512i half[2] = {_mm512_load_si512(kInterleave[0]), _mm512_load_si512(kInterleave[1])};
  const __m512i m4 = _mm512_set1_epi16(15), m16 = _mm512_set1_epi32(0xFFFF), m32 = _mm512_set1_epi64(0xFFFFFFFF),
                ones = _mm512_set1_epi16(1);
  const __m512i lane15 = _mm512_set1_epi32(15), zero = _mm512_setzero_si512(), octet_max = _mm512_set1_epi64(57);
  const __m512i low_dwords =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);  // of two vectors of quads
  const __m128i lg = _mm_cvtsi32_si128(static_cast<int>(segment_log2));
  const uint32_t seg_mask = (1u << segment_log2) - 1;
  // With gap entries: `end` = every 32-bit lane the end of the last codeword so far, in bits
  // from the segment start before `in` (below 2^15: n is at most 2048 symbols of 12 bits).
  __m512i end = _mm512_set1_epi32(static_cast<int>(offset));
  // The ends of every 16 quads and which of them cross a boundary, resolved after the loop
  // (reading a lane right after its vector store would wait for the store).
  alignas(64) uint32_t ends[kMaxSymbols / 64][16];
  uint16_t crossing[kMaxSymbols / 64];
  // Software pipeline: the vector part of one 64-byte group, then the flushes of the group
  // before, so that the vector units and the scalar flushes overlap.
  // Octets: two quads joined in the even 64-bit lanes of oct_bits/oct_lens (lengths up to 96;
  // the bits are valid only up to 57: 7 pending bits + 57 fill the accumulator).
  alignas(64) uint64_t quad_bits[2][16], quad_lens[2][16], oct_bits[2][16], oct_lens[2][16];
  uint64_t acc = st.acc;
  uint32_t nacc = st.nacc;
  uint8_t* o = st.o;
  auto flush = [&](uint64_t bits, uint32_t len) {
    acc = acc << len | bits;
    nacc += len;  // at most 7 + 57
    const uint64_t v = __builtin_bswap64(acc << (64 - nacc));
    std::memcpy(o, &v, 8);
    o += nacc >> 3;
    nacc &= 7;
  };
  // A group whose eight octets all fit takes eight flushes, any other its sixteen quads'.
  uint32_t long_octets[2] = {0, 0};  // per group: the octets of more than 57 bits (mask bits)
  auto flush_group = [&](size_t g) {
    if (long_octets[g] == 0) {
#pragma GCC unroll 8
      for (int q = 0; q < 16; q += 2) flush(oct_bits[g][q], static_cast<uint32_t>(oct_lens[g][q]));
    } else {
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) flush(quad_bits[g][q], static_cast<uint32_t>(quad_lens[g][q]));
    }
  };
  for (size_t i = 0; i < n; i += 64) {
    // The input comes back from the L3 cache or memory (the chunk's histogram pass read it
    // first): on an Intel Xeon (2026-12-04) the loop otherwise waited on this load half its time
    // on Fashion-MNIST; with the prefetch 16 lines ahead encoding ran 6-13% faster.
    _mm_prefetch(reinterpret_cast<const char*>(in + i + 1024), _MM_HINT_T0);
    const __m512i x = _mm512_loadu_si512(in + i);
    const __mmask64 top = _mm512_movepi8_mask(x);  // byte values >= 128 use the tables' upper halves
    const __m512i l = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(lo0, x, lo1), _mm512_permutex2var_epi8(lo2, x, lo3));
    const __m512i h = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(hi0, x, hi1), _mm512_permutex2var_epi8(hi2, x, hi3));
    const size_t slot = (i >> 6) & 1;
    uint32_t long_mask = 0;
    __m512i n64[2];
    for (int k = 0; k < 2; ++k) {
      const __m512i e = _mm512_permutex2var_epi8(l, half[k], h);  // 32 entries code << 4 | length, in order
      const __m512i c16 = _mm512_srli_epi16(e, 4), n16 = _mm512_and_si512(e, m4);
      // Pairs: the earlier symbol is the low half of each 32-bit lane.
      const __m512i c32 =
          _mm512_or_si512(_mm512_sllv_epi32(_mm512_and_si512(c16, m16), _mm512_srli_epi32(n16, 16)), _mm512_srli_epi32(c16, 16));
      const __m512i n32 = _mm512_madd_epi16(n16, ones);
      // Quads: the same one level up.
      const __m512i c64 =
          _mm512_or_si512(_mm512_sllv_epi64(_mm512_and_si512(c32, m32), _mm512_srli_epi64(n32, 32)), _mm512_srli_epi64(c32, 32));
      n64[k] = _mm512_sad_epu8(n16, zero);  // the four lengths' bytes (high bytes 0)
      _mm512_store_si512(quad_bits[slot] + 8 * k, c64);
      _mm512_store_si512(quad_lens[slot] + 8 * k, n64[k]);
      // Octets in the even lanes: the earlier quad shifted by the later one's length.
      const __m512i c_next = _mm512_shuffle_epi32(c64, _MM_PERM_BADC), n_next = _mm512_shuffle_epi32(n64[k], _MM_PERM_BADC);
      const __m512i oct_len = _mm512_add_epi64(n64[k], n_next);
      _mm512_store_si512(oct_bits[slot] + 8 * k, _mm512_or_si512(_mm512_sllv_epi64(c64, n_next), c_next));
      _mm512_store_si512(oct_lens[slot] + 8 * k, oct_len);
      long_mask |= static_cast<uint32_t>(_mm512_cmpgt_epu64_mask(oct_len, octet_max) & 0x55) << (8 * k);
    }
    if (gaps) {
      // Quad ends of the 16 quads in 32-bit lanes: a prefix sum plus the end so far. A quad (at
      // most 48 bits) whose start and end lie in different segments crosses one boundary.
      const __m512i n = _mm512_permutex2var_epi32(n64[0], low_dwords, n64[1]);
      __m512i qe = n;
      qe = _mm512_add_epi32(qe, _mm512_alignr_epi32(qe, zero, 15));
      qe = _mm512_add_epi32(qe, _mm512_alignr_epi32(qe, zero, 14));
      qe = _mm512_add_epi32(qe, _mm512_alignr_epi32(qe, zero, 12));
      qe = _mm512_add_epi32(qe, _mm512_alignr_epi32(qe, zero, 8));
      qe = _mm512_add_epi32(qe, end);
      crossing[i >> 6] = _mm512_cmpneq_epi32_mask(_mm512_srl_epi32(qe, lg), _mm512_srl_epi32(_mm512_sub_epi32(qe, n), lg));
      _mm512_store_si512(ends[i >> 6], qe);
      end = _mm512_permutexvar_epi32(lane15, qe);
    }
    long_octets[slot] = long_mask;
    if (i > 0) flush_group(slot ^ 1);
  }
  flush_group(((n >> 6) - 1) & 1);
  st.acc = acc;
  st.nacc = nacc;
  st.o = o;
  // The boundary B that a crossing quad holds gets the first of its codeword ends at or after B,
  // minus B: the least of (end - B) taken as unsigned (an end before B wraps to a large value).
  // d0 is for the first codeword's end: the quad's end less the other three lengths.
  for (size_t k = 0; k < (gaps ? n >> 6 : 0); ++k)  // the 64-byte groups
    for (uint32_t c = crossing[k]; c; c &= c - 1) {
      const int q = __builtin_ctz(c);
      const uint8_t* sym = in + 64 * k + 4 * q;
      const uint32_t l1 = t.lo[sym[1]] & 15, l2 = t.lo[sym[2]] & 15, l3 = t.lo[sym[3]] & 15;
      const uint32_t qend = ends[k][q], b = qend & ~seg_mask;
      const uint32_t d0 = qend - (l1 + l2 + l3) - b, d1 = d0 + l1, d2 = d1 + l2;
      gaps[qend >> segment_log2] = static_cast<uint8_t>(std::min({d0, d1, d2, qend - b}));
    }
  const uint64_t total = gaps ? static_cast<uint64_t>(_mm_cvtsi128_si32(_mm512_castsi512_si128(end))) - offset : 0;
  _mm256_zeroupper();
  return total;
}
#else
uint64_t pack_quads(const uint8_t*, size_t, const QuadTables&, QuadStream&, uint8_t*, uint32_t, uint32_t) {
  std::abort();
}  // never: quad_pack_available() is false
#endif

}  // namespace hpcnn::huffman
