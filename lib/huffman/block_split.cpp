#include "huffman/block_split.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <memory>
#include <queue>
#include <string>

#include "core/error.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define HPCNN_SPLIT_AVX512 1
#include <immintrin.h>
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined operands
// (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace hpcnn::huffman {
namespace {

// log2 in fixed point with 24 fraction bits (Q24), for counts below 2^32: exact to rounding
// below 4096 (a table), else the table at the top 12 bits of c plus a linear step for the bits
// below (to about 1e-7). Integer arithmetic only: sums of these do not depend on their order,
// so they vectorize and every machine gets the same values.
// ts[i] = round(2^24 log2 i) | round(2^24 / (i ln 2)) << 32 (the slope, used for i >= 2048).
struct Log2Q24 {
  alignas(64) uint64_t ts[4096];
  Log2Q24() {
    ts[0] = 0;
    for (int i = 1; i < 4096; ++i) {
      const auto t = static_cast<uint64_t>(std::llround(std::ldexp(std::log2(static_cast<double>(i)), 24)));
      const auto slope = static_cast<uint64_t>(std::llround(std::ldexp(1.4426950408889634 / i, 24)));
      ts[i] = t | slope << 32;
    }
  }
};
const Log2Q24 kLog2Q24;

// c * log2(c) in Q24 for c < 2^32 (0 for c = 0): at most 2^32 * 2^29.
inline uint64_t c_log2_c(uint64_t c) {
  const int k = std::max(0, 52 - std::countl_zero(c | 1));  // c >> k < 4096
  const uint64_t top = c >> k, rest = c - (top << k), e = kLog2Q24.ts[top];
  const uint64_t log2c = (static_cast<uint64_t>(k) << 24) + (e & 0xFFFFFFFF) + ((rest * (e >> 32)) >> k);
  return c * log2c;
}

// What a block's cost needs from its histogram (a, or a + b): the sum of c log2 c (Q24), the
// byte count and the number of byte values that occur.
struct Sums {
  uint64_t clogc = 0, n = 0;
  int nsym = 0;
};

// The byte values of the chunk only (`present`, np of them; the other counts are 0).
template <bool kTwo>
Sums sums_scalar(const uint64_t* a, const uint64_t* b, const uint8_t* present, int np) {
  Sums r;
  for (int i = 0; i < np; ++i) {
    uint64_t c = a[present[i]];
    if constexpr (kTwo) c += b[present[i]];
    r.clogc += c < 4096 ? c * (kLog2Q24.ts[c] & 0xFFFFFFFF) : c_log2_c(c);
    r.n += c;
    r.nsym += c != 0;
  }
  return r;
}

#if defined(HPCNN_SPLIT_AVX512)
// The same over the counts [first, end) (first a multiple of 8), eight at a time (the table
// lookup a gather); tests compare it with sums_scalar().
template <bool kTwo>
__attribute__((target("avx512f,avx512cd"))) Sums sums_avx512(const uint64_t* a, const uint64_t* b, int first, int end) {
  const __m512i c52 = _mm512_set1_epi64(52), zero = _mm512_setzero_si512(), low32 = _mm512_set1_epi64(0xFFFFFFFF);
  __m512i acc = zero, n = zero;
  int nsym = 0;
  for (int i = first; i < end; i += 8) {
    __m512i c = _mm512_loadu_si512(a + i);
    if constexpr (kTwo) c = _mm512_add_epi64(c, _mm512_loadu_si512(b + i));
    nsym += __builtin_popcount(_mm512_test_epi64_mask(c, c));
    const __m512i k = _mm512_max_epi64(_mm512_sub_epi64(c52, _mm512_lzcnt_epi64(c)), zero);
    const __m512i top = _mm512_srlv_epi64(c, k), rest = _mm512_sub_epi64(c, _mm512_sllv_epi64(top, k));
    const __m512i e = _mm512_i64gather_epi64(top, reinterpret_cast<const long long*>(kLog2Q24.ts), 8);
    const __m512i step = _mm512_srlv_epi64(_mm512_mul_epu32(rest, _mm512_srli_epi64(e, 32)), k);
    const __m512i log2c = _mm512_add_epi64(_mm512_add_epi64(_mm512_slli_epi64(k, 24), _mm512_and_si512(e, low32)), step);
    acc = _mm512_add_epi64(acc, _mm512_mul_epu32(c, log2c));  // c < 2^32, log2c < 2^32
    n = _mm512_add_epi64(n, c);
  }
  Sums r{static_cast<uint64_t>(_mm512_reduce_add_epi64(acc)), static_cast<uint64_t>(_mm512_reduce_add_epi64(n)), nsym};
  _mm256_zeroupper();
  return r;
}
bool cpu_has_avx512_split() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd");
}
const bool kAvx512Split = cpu_has_avx512_split();
#endif

std::atomic<bool> g_vector_enabled{true};

// The sums of a histogram or of two, over the byte values of `total` (whose counts must add up
// to below 2^32, else a usage error from `who`).
struct Counter {
  uint8_t present[256];
  int np = 0;
  int first = 0, end = 0;  // the eights of counts from the first to the last byte value present
  bool vector = false;
  Counter(const Histogram& total, const char* who) {
    uint64_t n = 0;
    for (int k = 0; k < 256; ++k) {
      if (total[k] >> 32 || (n += total[k]) >> 32)
        throw_error(ErrorKind::usage, std::string(who) + ": the counts must add up to below 2^32");
      if (total[k]) present[np++] = static_cast<uint8_t>(k);
    }
    if (np > 0) first = present[0] & ~7, end = std::min(256, (present[np - 1] + 8) & ~7);
#if defined(HPCNN_SPLIT_AVX512)
    vector = kAvx512Split && g_vector_enabled.load(std::memory_order_relaxed);
#endif
  }
  Sums operator()(const uint64_t* a, const uint64_t* b = nullptr) const {
    if (np == 0) return {};
#if defined(HPCNN_SPLIT_AVX512)
    if (vector) return b ? sums_avx512<true>(a, b, first, end) : sums_avx512<false>(a, nullptr, first, end);
#endif
    return b ? sums_scalar<true>(a, b, present, np) : sums_scalar<false>(a, nullptr, present, np);
  }
};

uint64_t table_bits(int nsym) { return 8 * (32 + (static_cast<uint64_t>(nsym) + 1) / 2) + 96; }

// Estimated bits of a block in Q24: max(n log2 n - sum c log2 c, n << 24) + (table + penalty) << 24.
int64_t block_cost(const Sums& s) {
  if (s.n == 0) return 0;
  const auto entropy = static_cast<int64_t>(c_log2_c(s.n)) - static_cast<int64_t>(s.clogc);
  return std::max(entropy, static_cast<int64_t>(s.n << 24)) +
         static_cast<int64_t>((table_bits(s.nsym) + kBlockPenaltyBits) << 24);
}

struct Block {
  const uint64_t* hist;  // the unit's histogram until the block first absorbs its neighbour, then its own
  int64_t cost = 0;      // estimated bits (Q24): code + table + penalty
  uint32_t first = 0;    // first unit
  int prev = -1, next = -1;
  uint32_t version = 0;
  bool alive = true;
};

}  // namespace

void set_split_vector_enabled(bool enabled) { g_vector_enabled.store(enabled, std::memory_order_relaxed); }

int64_t block_cost_q24(const Histogram& h) { return block_cost(Counter(h, "block_cost_q24")(h.data())); }

uint64_t block_table_bits(const CodeLengths& lengths) {
  int nsym = 0;
  for (uint8_t l : lengths) nsym += l != 0;
  return table_bits(nsym);
}

CodeLengths block_code_lengths(const Histogram& hist, int code_limit) {
  int nsym = 0, sym = 0;
  for (int k = 0; k < 256; ++k)
    if (hist[k]) ++nsym, sym = k;
  if (nsym == 1) {
    CodeLengths l{};
    l[sym] = 1;
    l[sym == 255 ? 254 : sym + 1] = 1;
    return l;
  }
  return limited_code_lengths(hist, code_limit);
}

std::vector<uint32_t> split_blocks(std::span<const Histogram> units) {
  Histogram total{};
  for (const auto& h : units)
    for (int k = 0; k < 256; ++k) total[k] += h[k];
  return split_blocks(units, total, nullptr);
}

std::vector<uint32_t> split_blocks(std::span<const Histogram> units, const Histogram& total,
                                   std::vector<Histogram>* block_hists) {
  const size_t U = units.size();
  if (block_hists) block_hists->clear();
  if (U <= 1) {
    if (block_hists) block_hists->push_back(total);
    return {0};
  }
  const Counter sums(total, "split_blocks");  // over the byte values of the chunk
  // A block's own histogram, at its index, once it has absorbed a neighbour.
  std::unique_ptr<Histogram[]> own(new Histogram[U]);
  std::vector<Block> b;
  b.reserve(U);
  for (size_t u = 0; u < U; ++u) {
    Block& x = b.emplace_back(Block{units[u].data()});
    x.first = static_cast<uint32_t>(u);
    x.prev = static_cast<int>(u) - 1;
    x.next = u + 1 < U ? static_cast<int>(u) + 1 : -1;
    x.cost = block_cost(sums(x.hist));
  }
  // Greedy merging of the adjacent pair that lowers the estimated cost most.
  struct Pair {
    int64_t delta;
    int64_t merged;  // the merged block's cost
    int left;
    uint32_t vl, vr;
    bool operator<(const Pair& o) const { return delta != o.delta ? delta > o.delta : left > o.left; }  // min-heap
  };
  std::priority_queue<Pair> heap;
  auto push = [&](int l) {  // the merge of the block at l with its next, when it lowers the cost
    const int r = b[l].next;
    const int64_t merged = block_cost(sums(b[l].hist, b[r].hist));
    const int64_t delta = merged - b[l].cost - b[r].cost;
    if (delta < 0) heap.push({delta, merged, l, b[l].version, b[r].version});
  };
  for (size_t u = 0; u + 1 < U; ++u) push(static_cast<int>(u));
  while (!heap.empty()) {
    const Pair p = heap.top();
    heap.pop();
    const int l = p.left;
    if (!b[l].alive || b[l].version != p.vl) continue;
    const int r = b[l].next;
    if (r < 0 || b[r].version != p.vr) continue;
    uint64_t* h = own[l].data();
    const uint64_t* hl = b[l].hist;
    const uint64_t* hr = b[r].hist;
    for (int s = 0; s < 256; ++s) h[s] = hl[s] + hr[s];
    b[l].hist = h;
    b[l].cost = p.merged;  // the estimate of this same histogram, made when the pair was pushed
    ++b[l].version;
    b[r].alive = false;
    b[l].next = b[r].next;
    if (b[r].next >= 0) b[b[r].next].prev = l;
    if (b[l].prev >= 0) push(b[l].prev);
    if (b[l].next >= 0) push(l);
  }
  std::vector<uint32_t> starts;
  for (int k = 0; k >= 0; k = b[k].next) {
    starts.push_back(b[k].first);
    if (block_hists) {
      Histogram& bh = block_hists->emplace_back();
      std::copy(b[k].hist, b[k].hist + 256, bh.begin());
    }
  }
  return starts;
}

}  // namespace hpcnn::huffman
