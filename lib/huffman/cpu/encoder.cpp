#include "huffman/cpu/encoder.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "huffman/bitstream.h"
#include "huffman/chunk_plan.h"
#include "huffman/codebook.h"
#include "huffman/cpu/hot.h"

namespace hpcnn::huffman {
namespace {

constexpr size_t kMinPartBytes = 16 << 10;  // below this a part is not worth a thread
constexpr size_t kHistBlock = 16 << 10;     // histogram work unit

struct PartResult {
  uint32_t head = 0;         // first word when the part starts inside a word
  bool has_head = false;
};

// Packs in[0..n) from global bit `pos`; `enc[s]` = code | length << 24. Two codewords per step
// (at most 32 bits, so one flush check per step); the first word of the part goes to `head`
// when the part starts inside a word (the previous part writes that word; the caller ORs).
template <bool kGaps>
__attribute__((always_inline)) inline PartResult pack_part(const uint8_t* __restrict in, size_t n, const uint32_t* __restrict enc,
                                                           const uint32_t* __restrict pair, uint64_t pos, uint32_t* __restrict words,
                                                           uint8_t* __restrict gap_bytes, uint32_t segment_log2, uint64_t total_bits) {
  PartResult r;
  const uint64_t seg = uint64_t{1} << segment_log2;
  uint64_t next_k = (pos + seg - 1) >> segment_log2;  // first segment whose boundary lies here
  uint64_t next_boundary = next_k << segment_log2;
  uint32_t* w = words + (pos >> 5);
  uint64_t acc = 0;
  uint32_t nacc = static_cast<uint32_t>(pos & 31);
  uint64_t p = pos;
  size_t i = 0;
  auto gap = [&](uint64_t start) {
    gap_bytes[next_k] = static_cast<uint8_t>(start - next_boundary);
    ++next_k;
    next_boundary += seg;
  };
  // One codeword into the accumulator (and the gap array), without flushing.
  auto append_one = [&](uint8_t symbol) {
    const uint32_t e = enc[symbol];
    const uint32_t len = e >> 24;
    if constexpr (kGaps) {
      if (p >= next_boundary) gap(p);
      p += len;
    }
    acc = (acc << len) | (e & 0xFFFFFF);
    nacc += len;
  };
  // Until the first flush: that word may be shared with the previous part.
  if (nacc != 0) {
    while (i < n && nacc < 32) append_one(in[i++]);
    if (nacc >= 32) {
      nacc -= 32;
      r.head = static_cast<uint32_t>(acc >> nacc);
      r.has_head = true;
      ++w;
    } else {  // the whole part fits inside the shared word
      r.head = static_cast<uint32_t>(acc << (32 - nacc));
      r.has_head = true;
      if constexpr (kGaps) {
        if (p == total_bits && next_k < segment_count(total_bits, static_cast<uint32_t>(seg)) && p >= next_boundary) gap(p);
      }
      return r;
    }
  }
  if (pair) {
    // Two symbols per lookup: pair[b0 | b1 << 8] = both codewords (<= 24 bits) | bits << 24.
    // `rem` counts the bits left to the next segment boundary; only a crossing takes the slow path.
    int64_t rem = static_cast<int64_t>(next_boundary - p);
#pragma GCC unroll 4
    for (; i + 2 <= n; i += 2) {
      uint16_t two;
      std::memcpy(&two, in + i, 2);
      const uint32_t e = pair[two];
      const uint32_t l12 = e >> 24;
      if constexpr (kGaps) {
        if (__builtin_expect(rem < static_cast<int64_t>(l12), 0)) {
          // Codeword starts here: p and p + l1 (p = next_boundary - rem).
          const int64_t l1 = enc[in[i]] >> 24;
          if (rem <= 0 || l1 >= rem) {
            gap(next_boundary - rem + (rem <= 0 ? 0 : l1));
            rem += static_cast<int64_t>(seg);
          }
        }
        rem -= l12;
      }
      acc = (acc << l12) | (e & 0xFFFFFF);
      nacc += l12;
      const uint32_t full = nacc >> 5;
      nacc &= 31;
      *w = static_cast<uint32_t>(acc >> nacc);
      w += full;
    }
    p = next_boundary - rem;
  }
  for (; i + 2 <= n; i += 2) {
    const uint32_t e1 = enc[in[i]], e2 = enc[in[i + 1]];
    const uint32_t l1 = e1 >> 24, l2 = e2 >> 24;
    if constexpr (kGaps) {
      if (__builtin_expect(p + l1 >= next_boundary, 0)) gap(p >= next_boundary ? p : p + l1);
      p += l1 + l2;
    }
    acc = (acc << (l1 + l2)) | (uint64_t{e1 & 0xFFFFFF} << l2) | (e2 & 0xFFFFFF);
    nacc += l1 + l2;
    // Branch-free flush: the store always happens and only a full word advances the pointer
    // (a partial word stored here is overwritten later; *w is inside this part's words).
    const uint32_t full = nacc >> 5;
    nacc -= full << 5;
    *w = static_cast<uint32_t>(acc >> nacc);
    w += full;
  }
  for (; i < n; ++i) {
    append_one(in[i]);
    if (nacc >= 32) {
      nacc -= 32;
      *w++ = static_cast<uint32_t>(acc >> nacc);
    }
  }
  if (nacc > 0) *w = static_cast<uint32_t>(acc << (32 - nacc));
  if constexpr (kGaps) {
    // The end of the stream is a boundary too (for a last segment without a codeword start).
    if (p == total_bits && next_k < segment_count(total_bits, static_cast<uint32_t>(seg)) && p >= next_boundary) gap(p);
  }
  return r;
}

HPCNN_HOT_TARGET PartResult pack_part_gaps(const uint8_t* in, size_t n, const uint32_t* enc, const uint32_t* pair, uint64_t pos,
                                           uint32_t* words, uint8_t* gap_bytes, uint32_t segment_log2, uint64_t total_bits) {
  return pack_part<true>(in, n, enc, pair, pos, words, gap_bytes, segment_log2, total_bits);
}
HPCNN_HOT_TARGET PartResult pack_part_plain(const uint8_t* in, size_t n, const uint32_t* enc, const uint32_t* pair, uint64_t pos,
                                            uint32_t* words, uint32_t segment_log2, uint64_t total_bits) {
  return pack_part<false>(in, n, enc, pair, pos, words, nullptr, segment_log2, total_bits);
}

// Pair table for codes of at most 12 bits, worth building for large chunks only.
constexpr size_t kPairTableMinBytes = 128 << 10;
// Pairs of a small alphabet stay in the L1/L2 caches; with many symbols the 256 KiB table misses.
constexpr int kPairTableMaxSymbols = 128;
void build_pair_row(const std::array<uint32_t, 256>& enc, uint32_t b1, uint32_t* pair) {
  const uint32_t e1 = enc[b1], l1 = e1 >> 24;
  for (uint32_t b0 = 0; b0 < 256; ++b0) {
    const uint32_t e0 = enc[b0], l0 = e0 >> 24;
    pair[b0 | b1 << 8] = ((e0 & 0xFFFFFF) << l1 | (e1 & 0xFFFFFF)) | (l0 + l1) << 24;
  }
}

}  // namespace

HPCNN_HOT_TARGET void byte_histogram(const uint8_t* in, size_t n, uint64_t counts[256]) {
  // Eight sub-histograms, one per byte of a 64-bit load: runs of one byte value (common in
  // images) then never increment the same counter twice in a row.
  uint32_t h[8][256] = {};
  size_t i = 0;
  while (i < n) {
    const size_t stop = std::min(n, i + (size_t{1} << 30));  // 32-bit counters: flush in time
    for (; i + 8 <= stop; i += 8) {
      uint64_t v;
      std::memcpy(&v, in + i, 8);
      ++h[0][v & 0xFF];
      ++h[1][(v >> 8) & 0xFF];
      ++h[2][(v >> 16) & 0xFF];
      ++h[3][(v >> 24) & 0xFF];
      ++h[4][(v >> 32) & 0xFF];
      ++h[5][(v >> 40) & 0xFF];
      ++h[6][(v >> 48) & 0xFF];
      ++h[7][v >> 56];
    }
    for (; i < stop; ++i) ++h[0][in[i]];
    for (int s = 0; s < 256; ++s) {
      uint64_t sum = 0;
      for (int k = 0; k < 8; ++k) {
        sum += h[k][s];
        h[k][s] = 0;
      }
      counts[s] += sum;
    }
  }
}

void encode_chunk(const uint8_t* in, size_t n, const FileHeader& fh, int threads, std::vector<uint8_t>& out) {
  if (n == 0 || n > fh.chunk_size) throw_error(ErrorKind::usage, "encode_chunk: chunk size out of range");
  const int T = static_cast<int>(std::clamp<size_t>(n / kMinPartBytes, 1, static_cast<size_t>(std::max(threads, 1))));
  // Histograms per block, taken by the threads dynamically while one of them also hashes the
  // chunk; the T packing parts are runs of whole blocks, so their bit counts follow from the
  // block histograms.
  const size_t nblocks = (n + kHistBlock - 1) / kHistBlock;
  thread_local std::vector<Histogram> block_hist;
  block_hist.assign(nblocks, Histogram{});
  Histogram* const bh = block_hist.data();  // thread_local: hand the workers a plain pointer
  std::vector<size_t> bound(T + 1), first_block(T + 1);
  for (int t = 0; t <= T; ++t) {
    first_block[t] = nblocks * t / T;
    bound[t] = std::min(n, first_block[t] * kHistBlock);
  }
  uint64_t checksum = 0;
#pragma omp parallel num_threads(T)
  {
#pragma omp single nowait
    checksum = checksum64(in, n);
#pragma omp for schedule(dynamic, 1)
    for (size_t b = 0; b < nblocks; ++b)
      byte_histogram(in + b * kHistBlock, std::min(kHistBlock, n - b * kHistBlock), bh[b].data());
  }
  std::vector<Histogram> part_hist(T, Histogram{});
  for (int t = 0; t < T; ++t)
    for (size_t b = first_block[t]; b < first_block[t + 1]; ++b)
      for (int s = 0; s < 256; ++s) part_hist[t][s] += block_hist[b][s];
  Histogram hist{};
  for (const auto& h : part_hist)
    for (int s = 0; s < 256; ++s) hist[s] += h[s];
  const ChunkPlan plan = plan_chunk(hist, n, fh);
  if (plan.mode == ChunkMode::single_symbol) return write_single_symbol_chunk(plan, n, checksum, out);
  if (plan.mode == ChunkMode::raw) return write_raw_chunk(in, n, checksum, out);
  const auto& enc = plan.enc;
  const auto& lay = plan.layout;
  std::vector<uint64_t> start(T + 1, 0);
  for (int t = 0; t < T; ++t) {
    uint64_t bits = 0;
    for (int s = 0; s < 256; ++s) bits += part_hist[t][s] * plan.lengths[s];
    start[t + 1] = start[t] + bits;
  }
  const uint64_t total_bits = start[T];
  begin_huffman_chunk(plan, out);
  auto* words = reinterpret_cast<uint32_t*>(out.data() + lay.words_offset);
  const uint64_t nseg = segment_count(total_bits, fh.segment_bits());
  std::vector<uint8_t> gap_bytes(fh.gap_array() ? nseg : 0, 0);
  int nsym = 0;
  for (int s = 0; s < 256; ++s) nsym += hist[s] != 0;
  thread_local std::vector<uint32_t> pair;
  uint32_t* pair_ptr = nullptr;
  if (n >= kPairTableMinBytes && nsym <= kPairTableMaxSymbols && *std::max_element(plan.lengths.begin(), plan.lengths.end()) <= 12) {
    pair.resize(65536);
    pair_ptr = pair.data();
  }
  std::vector<PartResult> parts(T);
#pragma omp parallel num_threads(T)
  {
    if (pair_ptr) {
#pragma omp for schedule(static)
      for (int b1 = 0; b1 < 256; ++b1) build_pair_row(enc, static_cast<uint32_t>(b1), pair_ptr);
    }
    const int t = omp_get_thread_num();
    const size_t len = bound[t + 1] - bound[t];
    if (len) {
      parts[t] = fh.gap_array()
                     ? pack_part_gaps(in + bound[t], len, enc.data(), pair_ptr, start[t], words, gap_bytes.data(), fh.segment_log2, total_bits)
                     : pack_part_plain(in + bound[t], len, enc.data(), pair_ptr, start[t], words, fh.segment_log2, total_bits);
    }
  }
  for (int t = 0; t < T; ++t)
    if (parts[t].has_head) words[start[t] >> 5] |= parts[t].head;
  if (fh.gap_array()) {
    uint8_t* g = out.data() + lay.gap_offset;
    for (uint64_t k = 0; k < nseg; ++k) g[k >> 1] |= static_cast<uint8_t>(gap_bytes[k] << ((k & 1) * 4));
  }
  finish_huffman_chunk(plan, n, checksum, out);
}

}  // namespace hpcnn::huffman
