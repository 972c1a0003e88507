#include "huffman/codebook.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "huffman/bitstream.h"
#include "huffman/cpu/hot.h"  // HPCNN_VECTOR_TARGET: an AVX2 clone of the table fill

namespace hpcnn::huffman {

CodeLengths limited_code_lengths(const Histogram& counts, int limit) {
  // Symbols by count, ties by symbol (the order a stable sort of the ascending symbols gives):
  // sorted as keys count << 8 | symbol.
  std::array<uint64_t, 256> key{};
  int n = 0;
  for (int s = 0; s < 256; ++s)
    if (counts[s]) {
      if (counts[s] >> 56) throw_error(ErrorKind::usage, "limited_code_lengths: counts must be below 2^56");
      key[n++] = counts[s] << 8 | static_cast<uint64_t>(s);
    }
  if (n < 2) throw_error(ErrorKind::bad_input, "a Huffman code needs at least two symbols");
  if (limit < 8 || limit > kMaxCodeLength) throw_error(ErrorKind::usage, "code length limit must be 8..16");
  std::sort(key.begin(), key.begin() + n);
  // Leaf weights in that order at indices 1..n, with a sentinel on each side for the merges
  // below: 0 (every real weight is at least 1) and UINT64_MAX.
  std::array<uint64_t, 256 + 2> lx;
  std::array<uint8_t, 256> syms;
  lx[0] = 0;
  for (int i = 0; i < n; ++i) {
    lx[i + 1] = key[i] >> 8;
    syms[i] = static_cast<uint8_t>(key[i]);
  }
  lx[n + 1] = UINT64_MAX;
  const uint64_t* lw = lx.data() + 1;  // rank r's weight

  // Huffman's code first (two queues over the sorted leaves, O(n)): when it is no deeper than
  // the limit it is optimal under the limit too, and package-merge is not needed.
  {
    std::array<uint64_t, 2 * 256> w{};
    std::array<int, 2 * 256> parent{};
    int a = 0, b = n, next = n;  // leaf queue front, internal-node queue front, next node
    auto take = [&]() {
      const bool leaf = a < n && (b == next || lw[a] <= w[b]);
      const int node = leaf ? a++ : b++;
      if (leaf) w[node] = lw[node];
      return node;
    };
    for (; next < 2 * n - 1; ++next) {
      const int x = take(), y = take();
      w[next] = w[x] + w[y];
      parent[x] = parent[y] = next;
    }
    std::array<int, 2 * 256> depth{};
    int deepest = 0;
    for (int i = 2 * n - 3; i >= 0; --i) {  // parents come after their children
      depth[i] = depth[parent[i]] + 1;
      if (i < n) deepest = std::max(deepest, depth[i]);
    }
    if (deepest <= limit) {
      CodeLengths out{};
      for (int r = 0; r < n; ++r) out[syms[r]] = static_cast<uint8_t>(depth[r]);
      return out;
    }
  }

  // Package-merge without trees: level L (deepest) lists the leaves by weight; level j merges
  // the leaves with the packages (pairs) of level j+1's list, leaves first on ties. The 2n-2
  // cheapest items of level 1 form the code, and the items taken from each level are a prefix
  // of its list: so only the number of leaves in each level's prefix is needed, and the symbol
  // of weight rank r gets one bit for every level whose prefix holds more than r leaves.
  // Each merge runs as four independent chains of loads and compares, without branches: the
  // list is cut in two halves (the leaves in the first half found by binary search: leaf i is
  // among the first k items when it comes before package k - i + 1), and each half is merged
  // from both ends at once, the front taking the lesser item, the back the greater (a package on
  // ties). (Two chains, 2026-12-04: one merge chain waits for its load, compare and index
  // update, about 8 cycles an item.)
  constexpr int kMaxItems = 2 * 256;
  std::array<std::array<uint64_t, kMaxItems>, kMaxCodeLength + 1> weight;
  std::array<std::array<uint8_t, kMaxItems>, kMaxCodeLength + 1> leaf;
  std::array<int, kMaxCodeLength + 1> size{};
  std::array<uint64_t, kMaxItems / 2 + 2> px;  // package weights, with sentinels as lx
  for (int i = 0; i < n; ++i) {
    weight[limit][i] = lw[i];
    leaf[limit][i] = 1;
  }
  size[limit] = n;
  for (int level = limit - 1; level >= 1; --level) {
    const uint64_t* below = weight[level + 1].data();
    uint64_t* out_w = weight[level].data();
    uint8_t* out_leaf = leaf[level].data();
    const int packages = size[level + 1] / 2;
    const int items = n + packages;
    px[0] = 0;
    for (int j = 0; j < packages; ++j) px[j + 1] = below[2 * j] + below[2 * j + 1];
    px[packages + 1] = UINT64_MAX;
    // Quarters of Q items: front A [0, Q), back A [Q, 2Q), front B [2Q, 3Q), back B [3Q, items).
    const int Q = items / 4, mid = 2 * Q;
    int lo = std::max(0, mid - packages), hi = std::min(mid, n);  // leaves among the first mid items
    while (lo < hi) {
      const int i = (lo + hi + 1) / 2;
      if (lx[i] <= px[mid - i + 1])
        lo = i;
      else
        hi = i - 1;
    }
    using Index = std::ptrdiff_t;                                     // (int indices took a sign extension per load)
    Index fa1 = 1, fb1 = 1, ba1 = lo, bb1 = mid - lo;                 // half A: front and back
    Index fa2 = lo + 1, fb2 = mid - lo + 1, ba2 = n, bb2 = packages;  // half B
    auto front = [&](Index k, Index& fa, Index& fb) {
      const uint64_t fl = lx[fa], fp = px[fb];
      const bool front_leaf = fl <= fp;
      out_w[k] = front_leaf ? fl : fp;
      out_leaf[k] = front_leaf;
      fa += front_leaf;
      fb += !front_leaf;
    };
    auto back = [&](Index k, Index& ba, Index& bb) {
      const uint64_t bl = lx[ba], bp = px[bb];
      const bool back_package = bp >= bl;
      out_w[k] = back_package ? bp : bl;
      out_leaf[k] = !back_package;
      ba -= !back_package;
      bb -= back_package;
    };
    for (Index k = 0; k < Q; ++k) {
      front(k, fa1, fb1);
      back(mid - 1 - k, ba1, bb1);
      front(mid + k, fa2, fb2);
      back(items - 1 - k, ba2, bb2);
    }
    for (Index k = items - 1 - Q; k >= mid + Q; --k) back(k, ba2, bb2);  // the items % 4 left
    size[level] = items;
  }
  std::array<int, kMaxCodeLength + 1> leaves_taken{};
  int take = 2 * n - 2;
  for (int level = 1; level <= limit; ++level) {
    int leaves = 0;
    for (int i = 0; i < take; ++i) leaves += leaf[level][i];
    leaves_taken[level] = leaves;
    take = 2 * (take - leaves);
  }
  CodeLengths out{};
  for (int r = 0; r < n; ++r) {
    int len = 0;
    for (int level = 1; level <= limit; ++level) len += r < leaves_taken[level];
    out[syms[r]] = static_cast<uint8_t>(len);
  }
  return out;
}

namespace {

// Per-length counts and codes in eight runs of 32 symbols side by side: a counter update waits
// for the one before it when lengths repeat (a store and a load of the same element, about 5
// cycles), so one run over 256 symbols took four of these chains a third of a decode-table build
// (2026-12-04); eight independent chains overlap.
constexpr int kRuns = 8, kRunSymbols = 256 / kRuns;
using RunCounts = std::array<std::array<uint32_t, kMaxCodeLength + 1>, kRuns>;

RunCounts run_length_counts(const CodeLengths& lengths) {
  RunCounts cnt{};
  for (int s = 0; s < kRunSymbols; ++s)
#pragma GCC unroll 8
    for (int q = 0; q < kRuns; ++q) ++cnt[q][lengths[kRunSymbols * q + s]];
  return cnt;
}

// Canonical codes from the run counts of those lengths.
std::array<uint32_t, 256> codes_from_runs(const CodeLengths& lengths, const RunCounts& cnt) {
  // next[q][len]: the code of run q's first symbol of that length (canonical: codes ascend by
  // length, then by symbol value, so the runs' codes of one length follow each other).
  RunCounts next{};
  uint32_t code = 0, before = 0;  // before: codewords one length shorter
  for (int len = 1; len <= kMaxCodeLength; ++len) {
    code = (code + before) << 1;
    before = 0;
    for (int q = 0; q < kRuns; ++q) {
      next[q][len] = code + before;
      before += cnt[q][len];
    }
  }
  std::array<uint32_t, 256> codes{};
  for (int s = 0; s < kRunSymbols; ++s)
#pragma GCC unroll 8
    for (int q = 0; q < kRuns; ++q) {
      const int l = lengths[kRunSymbols * q + s];
      const uint32_t c = next[q][l]++;  // next[q][0] counts absent symbols: unused
      codes[kRunSymbols * q + s] = l ? c : 0;
    }
  return codes;
}

}  // namespace

std::array<uint32_t, 256> canonical_codes(const CodeLengths& lengths) {
  return codes_from_runs(lengths, run_length_counts(lengths));
}

size_t code_table_size(const CodeLengths& lengths) {
  size_t n = 0;
  for (uint8_t l : lengths) n += l != 0;
  return 32 + (n + 1) / 2;
}

void write_code_table(const CodeLengths& lengths, uint8_t* out) {
  std::fill(out, out + 32, 0);
  size_t k = 0;
  uint8_t* nib = out + 32;
  for (int s = 0; s < 256; ++s) {
    if (!lengths[s]) continue;
    out[s >> 3] |= static_cast<uint8_t>(1u << (s & 7));
    const uint8_t v = static_cast<uint8_t>(lengths[s] - 1);
    if (k & 1)
      nib[k >> 1] |= static_cast<uint8_t>(v << 4);
    else
      nib[k >> 1] = v;
    ++k;
  }
}

CodeLengths read_code_table(const uint8_t* in, size_t avail, int limit, size_t* consumed, const std::string& where) {
  if (avail < 32) throw_error(ErrorKind::bad_input, "truncated code-length table " + where);
  int n = 0;
  for (int i = 0; i < 32; ++i) n += __builtin_popcount(in[i]);
  const size_t size = 32 + (static_cast<size_t>(n) + 1) / 2;
  if (avail < size) throw_error(ErrorKind::bad_input, "truncated code-length table " + where);
  if (n < 2) throw_error(ErrorKind::bad_input, "code-length table with " + std::to_string(n) + " symbols " + where);
  CodeLengths lengths{};
  size_t k = 0;
  uint64_t kraft = 0;  // in units of 2^-16
  for (int s = 0; s < 256; ++s) {
    if (!(in[s >> 3] >> (s & 7) & 1)) continue;
    const uint8_t v = (in[32 + (k >> 1)] >> ((k & 1) * 4)) & 0xF;
    ++k;
    const int len = v + 1;
    if (len > limit)
      throw_error(ErrorKind::bad_input, "code length " + std::to_string(len) + " of symbol " + std::to_string(s) +
                                            " exceeds the limit " + std::to_string(limit) + " " + where);
    lengths[s] = static_cast<uint8_t>(len);
    kraft += uint64_t{1} << (kMaxCodeLength - len);
  }
  if (kraft != (uint64_t{1} << kMaxCodeLength))
    throw_error(ErrorKind::bad_input, "code-length table is not a complete prefix code " + where);
  if ((n & 1) && (in[size - 1] >> 4) != 0)
    throw_error(ErrorKind::bad_input, "non-zero padding nibble in a code-length table " + where);
  *consumed = size;
  return lengths;
}

namespace {

// The symbols in canonical order (by length, then symbol value: their codewords ascend), and
// for each width W the number of W-bit prefixes that codewords of at most W bits cover.
struct CanonicalOrder {
  int n = 0;
  std::array<uint8_t, 256> sym{}, len{};
  std::array<uint32_t, kMaxCodeLength + 1> per_length{};  // codewords of each length
  std::array<uint32_t, kMaxCodeLength + 1> cover{};
};

// A symbol's place in canonical order is the number of codewords shorter than its own plus its
// code's offset among those of its length.
CanonicalOrder canonical_order(const CodeLengths& lengths, const std::array<uint32_t, 256>& codes, const RunCounts& cnt) {
  CanonicalOrder c;
  auto& per_length = c.per_length;
  for (int q = 0; q < kRuns; ++q)
    for (int l = 1; l <= kMaxCodeLength; ++l) per_length[l] += cnt[q][l];
  // base[l] = the place of the first codeword of length l, minus that codeword.
  std::array<uint32_t, kMaxCodeLength + 1> base{};
  uint32_t place = 0, code = 0;
  for (int l = 1; l <= kMaxCodeLength; ++l) {
    code = (code + per_length[l - 1]) << 1;
    base[l] = place - code;
    place += per_length[l];
  }
  c.n = static_cast<int>(place);
  for (int s = 0; s < 256; ++s) {
    const int l = lengths[s];
    if (!l) continue;
    const uint32_t k = base[l] + codes[s];
    c.sym[k] = static_cast<uint8_t>(s);
    c.len[k] = static_cast<uint8_t>(l);
  }
  for (int w = 0; w <= kMaxCodeLength; ++w)
    for (int l = 1; l <= w; ++l) c.cover[w] += per_length[l] << (w - l);
  return c;
}

// Multi-symbol root entries, width by width. For every width W < K, `one` holds at offset 2^W
// the entries of all W-bit windows with at most one whole codeword in them and `two` those with
// at most two (count 0: none fits). The codewords of at most W bits own consecutive ranges of
// the W-bit windows, in canonical order, up to cover[W]; a range's entries are its codeword
// followed by the entries of the remaining W - l bits one level down. The root (W = K) is the
// same one level up from `two`, so an entry decodes up to three codewords; root entries past
// cover[K] (prefixes of longer codewords: second-level pointers) are left as they are. Every
// entry is the same as decoding the window codeword by codeword (up to three); each is written
// once, in loops over runs that the compiler vectorizes (the recursive fill it replaces spent
// most of its time on calls for runs of a few entries: 2026-12-04, about twice as slow).
//
// Entry: symbols in bytes 0-2, bits used | count << 6 in byte 3. Prepending codeword s of length
// l to an entry x of at most two symbols: its symbols move up a byte and l + 64 is added to the
// top byte (used + l < 64, count + 1 <= 3, so no field overflows).
HPCNN_VECTOR_TARGET void fill_multi(uint32_t* root, int K, const CanonicalOrder& c) {
  thread_local std::vector<uint32_t> scratch;  // entries of an earlier code until overwritten
  scratch.resize(size_t{2} << K);
  uint32_t* const one = scratch.data();
  uint32_t* const two = one + (size_t{1} << K);
  // Fills dst[0, 2^W): each codeword of at most W bits followed by src (windows of W - l bits,
  // at offset 2^(W - l); null: nothing after it), the rest with 0.
  auto fill_width = [&](uint32_t* dst, int W, const uint32_t* src) {
    uint32_t at = 0;
    for (int k = 0; k < c.n && c.len[k] <= W; ++k) {
      const int l = c.len[k];
      const uint32_t run = 1u << (W - l);
      const uint32_t pre = c.sym[k] | static_cast<uint32_t>(l + 64) << 24;
      uint32_t* __restrict d = dst + at;
      if (!src) {
        std::fill_n(d, run, pre);
      } else {
        const uint32_t* __restrict x = src + run;
        for (uint32_t r = 0; r < run; ++r) d[r] = ((x[r] & 0xFFFF) << 8) + (x[r] & 0xFF000000u) + pre;
      }
      at += run;
    }
    return at;
  };
  // Only the widths that are read: `two` at K - l and `one` at W - l for the lengths l that occur
  // (width 0, no bits left: no codeword).
  one[1] = two[1] = 0;
  bool lengths_present[kMaxCodeLength + 1] = {}, need_two[kMaxCodeLength + 1] = {}, need_one[kMaxCodeLength + 1] = {};
  for (int k = 0; k < c.n; ++k) lengths_present[c.len[k]] = true;
  for (int l = 1; l < K; ++l)
    if (lengths_present[l]) need_two[K - l] = true;
  for (int W = 1; W < K; ++W)
    for (int l = 1; l < W && need_two[W]; ++l)
      if (lengths_present[l]) need_one[W - l] = true;
  for (int W = 1; W < K; ++W) {
    if (!need_one[W]) continue;
    uint32_t* d = one + (size_t{1} << W);
    std::fill(d + fill_width(d, W, nullptr), d + (size_t{1} << W), 0u);
  }
  for (int W = 1; W < K; ++W) {
    if (!need_two[W]) continue;
    uint32_t* d = two + (size_t{1} << W);
    std::fill(d + fill_width(d, W, one), d + (size_t{1} << W), 0u);
  }
  fill_width(root, K, two);
}

}  // namespace

DecodeTable build_decode_table(const CodeLengths& lengths, int root_bits, bool multi) {
  DecodeTable t;
  build_decode_table(lengths, root_bits, multi, t);
  return t;
}

void build_decode_table(const CodeLengths& lengths, int root_bits, bool multi, DecodeTable& t) {
  const int K = root_bits;  // fixed, so decoders can shift by a constant
  if (K < 1 || K > kMaxCodeLength) throw_error(ErrorKind::usage, "build_decode_table: root_bits must be 1..16");
  t.lengths = lengths;
  const RunCounts runs = run_length_counts(lengths);
  const auto codes = codes_from_runs(lengths, runs);
  const CanonicalOrder order = canonical_order(lengths, codes, runs);
  t.max_length = 0;
  t.min_length = kMaxCodeLength;
  for (int l = 1; l <= kMaxCodeLength; ++l)
    if (order.per_length[l]) {
      t.max_length = l;
      t.min_length = std::min(t.min_length, l);
    }
  t.root_bits = K;
  // Every root entry below cover[K] is written below (codewords of at most K bits tile that
  // range); the rest are prefixes of longer codewords (second-level pointers) in a complete
  // code, and 0 where a code is incomplete.
  t.root.resize(size_t{1} << K);
  std::fill(t.root.begin() + order.cover[K], t.root.end(), 0u);
  t.sub.clear();
  if (t.max_length > K) {
    // Second-level tables: per K-bit prefix of longer codewords, as wide as the longest of them
    // minus K; the root entry points to it (count 0).
    std::vector<int> sub_width(size_t{1} << K, 0);
    for (int s = 0; s < 256; ++s) {
      const int len = lengths[s];
      if (len > K) {
        const uint32_t prefix = codes[s] >> (len - K);
        sub_width[prefix] = std::max(sub_width[prefix], len - K);
      }
    }
    std::vector<uint32_t> sub_start(size_t{1} << K, 0);
    for (size_t p = 0; p < sub_width.size(); ++p) {
      if (!sub_width[p]) continue;
      sub_start[p] = static_cast<uint32_t>(t.sub.size());
      t.root[p] = (sub_start[p] << 5) | static_cast<uint32_t>(sub_width[p]);
      t.sub.resize(t.sub.size() + (size_t{1} << sub_width[p]), 0);
    }
    for (int s = 0; s < 256; ++s) {
      const int len = lengths[s];
      if (len <= K) continue;
      const uint32_t entry = static_cast<uint32_t>(s) | static_cast<uint32_t>(len) << 24 | 1u << 30;
      const uint32_t prefix = codes[s] >> (len - K);
      const int w = sub_width[prefix];
      const uint32_t low = codes[s] & ((1u << (len - K)) - 1);
      const uint32_t first = low << (w - (len - K));
      std::fill_n(t.sub.data() + sub_start[prefix] + first, size_t{1} << (w - (len - K)), entry);
    }
  }
  if (multi) {
    // A root entry whose K bits hold further whole codewords decodes up to three at once.
    fill_multi(t.root.data(), K, order);
  } else {
    for (int s = 0; s < 256; ++s) {
      const int len = lengths[s];
      if (!len || len > K) continue;
      const uint32_t entry = static_cast<uint32_t>(s) | static_cast<uint32_t>(len) << 24 | 1u << 30;
      std::fill_n(t.root.data() + (codes[s] << (K - len)), size_t{1} << (K - len), entry);
    }
  }
}

}  // namespace hpcnn::huffman
