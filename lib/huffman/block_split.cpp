#include "huffman/block_split.h"

#include <cmath>
#include <algorithm>
#include <memory>
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
  const uint64_t* hist;  // the unit's histogram until the block first absorbs its neighbour, then its own
  double cost = 0;     // estimated bits: code + table + penalty
  uint32_t first = 0;  // first unit
  int prev = -1, next = -1;
  uint32_t version = 0;
  bool alive = true;
};

uint64_t table_bits(int nsym) { return 8 * (32 + (static_cast<uint64_t>(nsym) + 1) / 2) + 96; }

// The estimates of K histograms at once, over the byte values that occur in the chunk (`present`,
// np of them): the sum of c*log2(c) in byte-value order, one chain of additions per histogram,
// the K chains side by side (a chain's additions wait for each other; K of them fill the
// pipeline). A zero count adds exactly +0.0, which leaves a sum of positive terms unchanged, so
// each sum is the same double as over the nonzero counts alone.
template <int K>
void estimate(const uint64_t* const* h, const uint8_t* present, int np, double* cost) {
  double s[K] = {};
  uint64_t n[K] = {};
  int nsym[K] = {};
  for (int i = 0; i < np; ++i) {
    const int b = present[i];
    for (int k = 0; k < K; ++k) {
      const uint64_t c = h[k][b];
      s[k] += c_log2_c(c);
      n[k] += c;
      nsym[k] += c != 0;
    }
  }
  for (int k = 0; k < K; ++k) {
    if (n[k] == 0) {
      cost[k] = 0;
      continue;
    }
    const double entropy = static_cast<double>(n[k]) * log2_count(n[k]) - s[k];
    cost[k] = std::max(entropy, static_cast<double>(n[k])) + static_cast<double>(table_bits(nsym[k]) + kBlockPenaltyBits);
  }
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
  Histogram total{};
  for (const auto& h : units)
    for (int k = 0; k < 256; ++k) total[k] += h[k];
  return split_blocks(units, total, nullptr);
}

std::vector<uint32_t> split_blocks(const std::vector<Histogram>& units, const Histogram& total, std::vector<Histogram>* block_hists) {
  const size_t U = units.size();
  if (block_hists) block_hists->clear();
  if (U <= 1) {
    if (block_hists) block_hists->push_back(total);
    return {0};
  }
  uint8_t present[256];  // the byte values of the chunk: the only entries read or written below
  int np = 0;
  for (int k = 0; k < 256; ++k)
    if (total[k]) present[np++] = static_cast<uint8_t>(k);
  // A block's own histogram, at its index, once it has absorbed a neighbour (present entries
  // only; never zeroed: the other entries are never read).
  std::unique_ptr<Histogram[]> own(new Histogram[U]);
  std::vector<Block> b;
  b.reserve(U);
  for (size_t u = 0; u < U; ++u) {
    Block& x = b.emplace_back(Block{units[u].data()});
    x.first = static_cast<uint32_t>(u);
    x.prev = static_cast<int>(u) - 1;
    x.next = u + 1 < U ? static_cast<int>(u) + 1 : -1;
  }
  constexpr int kBatch = 4;
  for (size_t u = 0; u < U; u += kBatch) {
    const uint64_t* h[kBatch];
    double cost[kBatch];
    const size_t k = std::min<size_t>(kBatch, U - u);
    for (size_t j = 0; j < kBatch; ++j) h[j] = units[std::min(u + j, U - 1)].data();
    estimate<kBatch>(h, present, np, cost);
    for (size_t j = 0; j < k; ++j) b[u + j].cost = cost[j];
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
  // Pushes the merges of the blocks at `left` (and their next) whose estimate lowers the cost;
  // K of them at once.
  Histogram m[kBatch];
  auto push = [&]<int K>(const int* left) {
    const uint64_t* h[K];
    double merged[K];
    for (int j = 0; j < K; ++j) {
      const int l = left[j], r = b[l].next;
      for (int i = 0; i < np; ++i) m[j][present[i]] = b[l].hist[present[i]] + b[r].hist[present[i]];
      h[j] = m[j].data();
    }
    estimate<K>(h, present, np, merged);
    for (int j = 0; j < K; ++j) {
      const int l = left[j], r = b[l].next;
      const double delta = merged[j] - b[l].cost - b[r].cost;
      if (delta < 0) heap.push({delta, merged[j], l, b[l].version, b[r].version});
    }
  };
  {
    int left[kBatch];
    int k = 0;
    for (size_t u = 0; u + 1 < U; ++u) {
      left[k++] = static_cast<int>(u);
      if (k == kBatch) {
        push.template operator()<kBatch>(left);
        k = 0;
      }
    }
    for (int j = 0; j < k; ++j) push.template operator()<1>(left + j);
  }
  while (!heap.empty()) {
    const Pair p = heap.top();
    heap.pop();
    const int l = p.left;
    if (!b[l].alive || b[l].version != p.vl) continue;
    const int r = b[l].next;
    if (r < 0 || b[r].version != p.vr) continue;
    uint64_t* h = own[l].data();
    if (b[l].hist == h)
      for (int i = 0; i < np; ++i) h[present[i]] += b[r].hist[present[i]];
    else
      for (int i = 0; i < np; ++i) h[present[i]] = b[l].hist[present[i]] + b[r].hist[present[i]];
    b[l].hist = h;
    b[l].cost = p.merged;  // the estimate of this same histogram, made when the pair was pushed
    ++b[l].version;
    b[r].alive = false;
    b[l].next = b[r].next;
    if (b[r].next >= 0) b[b[r].next].prev = l;
    // The merged block's pairs with its neighbours, side by side.
    int left[2];
    int k = 0;
    if (b[l].prev >= 0) left[k++] = b[l].prev;
    if (b[l].next >= 0) left[k++] = l;
    if (k == 2) push.template operator()<2>(left);
    else if (k == 1) push.template operator()<1>(left);
  }
  std::vector<uint32_t> starts;
  for (int k = 0; k >= 0; k = b[k].next) {
    starts.push_back(b[k].first);
    if (block_hists) {
      Histogram& bh = block_hists->emplace_back(Histogram{});
      for (int i = 0; i < np; ++i) bh[present[i]] = b[k].hist[present[i]];
    }
  }
  return starts;
}

}  // namespace hpcnn::huffman
