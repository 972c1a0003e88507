#include "huffman/block_split.h"

#include <cmath>
#include <algorithm>
#include <queue>

namespace hpcnn::huffman {
namespace {

// log2(c) for counts c >= 1, to about 1e-7: exact for c < 4096 (a table), else the table at the
// top 12 bits of c plus a linear step for the bits below. Plain integer and double arithmetic:
// the same value on every machine.
struct Log2Table {
  double v[4096];
  double slope[4096];  // 1 / (i ln 2): d log2(x) / dx at i
  double pow2neg[64];  // 2^-k
  double clog[4096];   // i * log2(i): below 4096 the estimate's product, bit for bit (see log2_count)
  Log2Table() {
    v[0] = slope[0] = 0;
    for (int i = 1; i < 4096; ++i) {
      v[i] = std::log2(static_cast<double>(i));
      slope[i] = 1.4426950408889634 / i;
    }
    for (int k = 0; k < 64; ++k) pow2neg[k] = std::ldexp(1.0, -k);
    for (int i = 0; i < 4096; ++i) clog[i] = static_cast<double>(i) * v[i];
  }
};
const Log2Table kLog2;

// Branch-free: below 4096, k = 0 and frac = 0, so the value is the table's, bit for bit.
inline double log2_count(uint64_t c) {
  const int k = std::max(0, 52 - __builtin_clzll(c | 1));  // c >> k in [2048, 4096) when c >= 4096
  const uint64_t top = c >> k;
  const double frac = static_cast<double>(c & ((uint64_t{1} << k) - 1)) * kLog2.pow2neg[k];
  return k + kLog2.v[top] + frac * kLog2.slope[top];
}

// c * log2(c), the same double as static_cast<double>(c) * log2_count(c).
inline double c_log2_c(uint64_t c) { return c < 4096 ? kLog2.clog[c] : static_cast<double>(c) * log2_count(c); }

struct Block {
  Histogram hist{};
  double cost = 0;     // estimated bits: code + table + penalty
  uint32_t first = 0;  // first unit
  int prev = -1, next = -1;
  uint32_t version = 0;
  bool alive = true;
};

uint64_t table_bits(int nsym) { return 8 * (32 + (static_cast<uint64_t>(nsym) + 1) / 2) + 96; }

// Over the byte values that occur in the chunk (`present`, np of them).
// The sum over the nonzero counts in byte-value order: a zero count adds exactly 0, so skipping
// them (after a branch-free compaction) gives the same double, and the chain of additions, the
// loop's critical path, gets shorter.
double estimate(const Histogram& h, const uint8_t* present, int np) {
  uint64_t nonzero[256];
  uint64_t n = 0;
  int nsym = 0;
  for (int i = 0; i < np; ++i) {
    const uint64_t c = h[present[i]];
    nonzero[nsym] = c;
    nsym += c != 0;
    n += c;
  }
  if (n == 0) return 0;
  double s = 0;
  for (int i = 0; i < nsym; ++i) s += c_log2_c(nonzero[i]);
  const double entropy = static_cast<double>(n) * log2_count(n) - s;
  return std::max(entropy, static_cast<double>(n)) + static_cast<double>(table_bits(nsym) + kBlockPenaltyBits);
}

}  // namespace

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

std::vector<uint32_t> split_blocks(const std::vector<Histogram>& units) {
  const size_t U = units.size();
  if (U <= 1) return {0};
  Histogram any{};  // nonzero where a byte value occurs in some unit (units in order: one pass over memory)
  for (const auto& h : units)
    for (int k = 0; k < 256; ++k) any[k] |= h[k];
  uint8_t present[256];
  int np = 0;
  for (int k = 0; k < 256; ++k)
    if (any[k]) present[np++] = static_cast<uint8_t>(k);
  std::vector<Block> b;
  b.reserve(U);
  for (size_t u = 0; u < U; ++u) {
    Block& x = b.emplace_back(Block{units[u]});
    x.cost = estimate(units[u], present, np);
    x.first = static_cast<uint32_t>(u);
    x.prev = static_cast<int>(u) - 1;
    x.next = u + 1 < U ? static_cast<int>(u) + 1 : -1;
  }
  // Greedy merging of the adjacent pair that lowers the estimated cost most.
  struct Pair {
    double delta;
    double merged;  // the merged block's cost
    int left;
    uint32_t vl, vr;
    bool operator<(const Pair& o) const { return delta != o.delta ? delta > o.delta : left > o.left; }  // min-heap
  };
  std::priority_queue<Pair> heap;
  Histogram m;
  auto push = [&](int l) {
    const int r = b[l].next;
    if (r < 0) return;
    for (int i = 0; i < np; ++i) m[present[i]] = b[l].hist[present[i]] + b[r].hist[present[i]];
    const double merged = estimate(m, present, np);
    const double delta = merged - b[l].cost - b[r].cost;
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
    for (int i = 0; i < np; ++i) b[l].hist[present[i]] += b[r].hist[present[i]];
    b[l].cost = p.merged;  // the estimate of this same histogram, made when the pair was pushed
    ++b[l].version;
    b[r].alive = false;
    b[l].next = b[r].next;
    if (b[r].next >= 0) b[b[r].next].prev = l;
    if (b[l].prev >= 0) push(b[l].prev);
    push(l);
  }
  std::vector<uint32_t> starts;
  for (int k = 0; k >= 0; k = b[k].next) starts.push_back(b[k].first);
  return starts;
}

}  // namespace hpcnn::huffman
