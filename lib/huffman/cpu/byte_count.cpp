#include "huffman/cpu/byte_count.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "huffman/cpu/hot.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define HPCNN_VALUE_TAKEOUT 1
#include <immintrin.h>
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined operands
// (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace hpcnn::huffman {
namespace {

// Byte counts in sixteen sub-histograms of 16-bit counters (8 KiB of the L1 cache), one per byte
// of each 16-byte step: runs of one byte value (common in images) then do not increment the same
// counter back to back. The loop is bound by its stores, about one cycle per byte; in one-process
// A/B runs (2026-12-04) this was 2% faster than four 32-bit sub-histograms on text and 4% on
// Fashion-MNIST (eight 16-bit ones: 0% and 2.5%). add() at most kMaxAdd bytes between two fold()s.
struct ByteCounter {
  static constexpr size_t kMaxAdd = size_t{1} << 19;  // at most 2^15 per 16-bit counter
  uint16_t h[16][256] = {};
  HPCNN_HOT_TARGET void add(const uint8_t* in, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      uint64_t a, b;
      std::memcpy(&a, in + i, 8);
      std::memcpy(&b, in + i + 8, 8);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) ++h[k][(a >> (8 * k)) & 0xFF];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) ++h[8 + k][(b >> (8 * k)) & 0xFF];
    }
    for (; i < n; ++i) ++h[i & 15][in[i]];
  }
  // counts[s] += (kAdd) or = the count of s since the last fold. Without kAdd at most 65535
  // bytes since the last fold (a unit), so that the sums stay in 16 bits (half the widening
  // work).
  template <bool kAdd>
  HPCNN_VECTOR_TARGET void fold(uint64_t counts[256]) {
    using Sum = std::conditional_t<kAdd, uint32_t, uint16_t>;
    for (int s = 0; s < 256; ++s) {
      Sum t = 0;
      for (int k = 0; k < 16; ++k) t = static_cast<Sum>(t + h[k][s]);
      counts[s] = (kAdd ? counts[s] : 0) + t;
    }
    std::memset(h, 0, sizeof h);
  }
};

std::atomic<bool> g_takeout_enabled{true};

#if defined(HPCNN_VALUE_TAKEOUT)
bool cpu_has_takeout() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi2") &&
         __builtin_cpu_supports("popcnt");
}
const bool kCpuHasTakeout = cpu_has_takeout();

// Counts the bytes of in[0..n) equal to values[j] into taken[j] and writes the others, in order,
// to out; returns how many it wrote (out holds n + 64 bytes).
template <int K>
__attribute__((target("avx512f,avx512bw,avx512vbmi2,popcnt"))) size_t take_out(const uint8_t* in, size_t n, const uint8_t* values, uint8_t* out,
                                                                              uint64_t* taken) {
  __m512i v[K];
  for (int j = 0; j < K; ++j) v[j] = _mm512_set1_epi8(static_cast<char>(values[j]));
  uint64_t c[K] = {};
  size_t kept = 0, i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i x = _mm512_loadu_si512(in + i);
    __mmask64 any = 0;
    for (int j = 0; j < K; ++j) {
      const __mmask64 m = _mm512_cmpeq_epi8_mask(x, v[j]);
      c[j] += static_cast<uint64_t>(__builtin_popcountll(m));
      any |= m;
    }
    _mm512_storeu_si512(out + kept, _mm512_maskz_compress_epi8(~any, x));  // the kept bytes first
    kept += static_cast<size_t>(64 - __builtin_popcountll(any));
  }
  std::memcpy(out + kept, in + i, n - i);  // the tail, counted by the scalar loop
  kept += n - i;
  for (int j = 0; j < K; ++j) taken[j] = c[j];
  _mm256_zeroupper();
  return kept;
}
#else
const bool kCpuHasTakeout = false;
#endif

}  // namespace

void byte_histogram(const uint8_t* in, size_t n, uint64_t counts[256]) {
  ByteCounter c;
  for (size_t i = 0; i < n; i += ByteCounter::kMaxAdd) {
    c.add(in + i, std::min(n - i, ByteCounter::kMaxAdd));
    c.fold<true>(counts);
  }
}

bool value_takeout_available() { return kCpuHasTakeout && g_takeout_enabled.load(std::memory_order_relaxed); }
void set_value_takeout_enabled(bool enabled) { g_takeout_enabled.store(enabled, std::memory_order_relaxed); }

struct UnitCounter::State {
  ByteCounter counter;
  int k = 0;            // values to take out of the next unit: 0, 1, 2 or 4
  uint8_t values[4] = {};
  alignas(64) uint8_t buf[kMaxUnit + 64];
};

UnitCounter::UnitCounter() : s_(new State) {}  // the buffer left uninitialized
UnitCounter::~UnitCounter() = default;

void UnitCounter::count(const uint8_t* in, size_t n, uint64_t counts[256]) {
  if (n > kMaxUnit) throw_error(ErrorKind::usage, "UnitCounter::count: a unit holds at most 65535 bytes");
  State& s = *s_;
#if defined(HPCNN_VALUE_TAKEOUT)
  if (s.k > 0 && value_takeout_available()) {
    uint64_t taken[4];
    const size_t kept = s.k == 1 ? take_out<1>(in, n, s.values, s.buf, taken)
                        : s.k == 2 ? take_out<2>(in, n, s.values, s.buf, taken)
                                   : take_out<4>(in, n, s.values, s.buf, taken);
    s.counter.add(s.buf, kept);
    s.counter.fold<false>(counts);
    for (int j = 0; j < s.k; ++j) counts[s.values[j]] += taken[j];
  } else
#endif
  {
    s.counter.add(in, n);
    s.counter.fold<false>(counts);
  }
  // The next unit's values: this one's four most frequent, as many of them as pay for their
  // compares. Cost per byte in cycles (Intel Xeon, 2026-12-04): scalar loop 1.045 for every byte
  // it counts; taking out K values 0.12, 0.17, 0.27 for K = 1, 2, 4.
  uint64_t top[4] = {};
  uint8_t val[4] = {};
  for (int v = 0; v < 256; ++v) {
    uint64_t c = counts[v];
    if (c <= top[3]) continue;
    int j = 3;
    for (; j > 0 && c > top[j - 1]; --j) {
      top[j] = top[j - 1];
      val[j] = val[j - 1];
    }
    top[j] = c;
    val[j] = static_cast<uint8_t>(v);
  }
  constexpr double kScalar = 1.045, kTakeout[5] = {0, 0.12, 0.17, 0, 0.27};
  const double bytes = static_cast<double>(std::max<size_t>(n, 1));
  int distinct = 0;  // values that occur among the four (a value is taken out at most once)
  while (distinct < 4 && top[distinct]) ++distinct;
  double best = kScalar;
  s.k = 0;
  for (int k : {1, 2, 4}) {
    if (k > distinct) break;
    uint64_t covered = 0;
    for (int j = 0; j < k; ++j) covered += top[j];
    const double cost = kScalar * (1 - static_cast<double>(covered) / bytes) + kTakeout[k];
    if (cost < best) best = cost, s.k = k;
  }
  std::copy(val, val + 4, s.values);
}

}  // namespace hpcnn::huffman
