#include "huffman/cpu/encoder.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "core/error.h"
#include "huffman/bitstream.h"
#include "huffman/block_split.h"
#include "huffman/chunk_plan.h"
#include "huffman/codebook.h"
#include "huffman/cpu/byte_count.h"
#include "huffman/cpu/byte_swap.h"
#include "huffman/cpu/hot.h"
#include "huffman/cpu/quad_pack.h"

namespace hpcnn::huffman {
namespace {

constexpr size_t kMinPartBytes = 16 << 10;  // below this a part is not worth a thread
constexpr size_t kPartsPerThread = 4;

struct PartResult {
  uint8_t head = 0;  // first byte when the part starts inside a byte
  bool has_head = false;
};

// Packs in[0..n), the codewords of bits [pos, end) of the chunk's stream, as a big-endian byte
// stream into `be` (the words region), turning it into little-endian 32-bit words in place as
// soon as they are final.
// `enc[s]` = code | length << 24; `pair` (codes of at most 12 bits, or null) = two codewords per
// lookup, as bits << 8 | length. A 64-bit accumulator takes up to 48 bits of codewords (two
// pair lookups, or 4 x 12 / 3 x 16 bits) between flushes; a flush stores 8 bytes and advances by
// the whole bytes it completed, so the stores stay inside the bytes the part owns, up to
// (end + 7) / 8.
// A part that starts inside a byte hands that byte's bits back as `head` for the caller to OR
// in (the previous part owns the byte).
//
// Gap array: entry k = (first codeword start at or after k*S) - k*S, where the end of the stream
// counts as a start. A part records the boundaries in (pos, end]: a boundary B in (q, q'] of two
// consecutive starts gets q' - B (the entry of a boundary exactly at the end of the stream is
// written to a spare slot past the array). The fast loop does not branch on boundaries: it
// notes each round's start and, per segment, the last round that ends inside it; after a block
// of rounds, each boundary's round follows from the segment before it. With pairs a round is
// two flushes (8 codewords): half the bookkeeping stores, about 3% faster on text.
constexpr size_t kBlockRounds = 256;
// kPerFlush: the codeword lookups per flush: 0 = two pair-table lookups, 4 or 3 = single
// lookups, kQuadFlush = pack_quads() (AVX-512) packs the rounds, 64 bytes at a time.
constexpr int kQuadFlush = 1;

template <bool kGaps, int kPerFlush>
__attribute__((always_inline)) inline PartResult pack_part(const uint8_t* __restrict in, size_t n, const uint32_t* __restrict enc,
                                                           const uint64_t* __restrict left, const uint32_t* __restrict pair,
                                                           const QuadTables* quad, uint64_t pos, uint64_t end,
                                                           uint8_t* __restrict be, uint8_t* __restrict gap_bytes,
                                                           uint32_t segment_log2) {
  PartResult r;
  const uint32_t lg = segment_log2;
  const uint64_t seg_mask = (uint64_t{1} << lg) - 1;
  uint8_t* o = be + (pos >> 3);
  uint8_t* const limit = be + ((end + 7) >> 3);  // one past the last byte this part owns
  // Words wholly this part's are turned into little-endian words as soon as they are final
  // (while still in cache): [(pos + 31) / 32, end / 32). The caller swaps the words the part
  // shares with its neighbours (and the last, padded word) after ORing in the heads.
  size_t swapped = static_cast<size_t>((pos + 31) >> 5);
  const size_t swap_end = static_cast<size_t>(end >> 5);
  auto swap_final_words = [&](size_t upto) {
    upto = std::min(upto, swap_end);
    if (upto <= swapped) return;
    swap_words_in_place(be + 4 * swapped, upto - swapped);
    swapped = upto;
  };
  uint64_t p = pos;  // bit position of the next codeword
  uint64_t acc = 0;
  uint32_t nacc = static_cast<uint32_t>(pos & 7);
  size_t i = 0;
  auto append = [&](uint32_t e) {
    const uint32_t len = e >> 24;
    if constexpr (kGaps) {
      const uint64_t q = p + len;
      if ((p >> lg) != (q >> lg)) gap_bytes[q >> lg] = static_cast<uint8_t>(q & seg_mask);
      p = q;
    }
    acc = (acc << len) | (e & 0xFFFFFF);
    nacc += len;
  };
  if (nacc != 0) {  // the first byte is shared with the previous part
    while (i < n && nacc < 8) append(enc[in[i++]]);
    if (nacc >= 8) {
      nacc -= 8;
      r.head = static_cast<uint8_t>(acc >> nacc);
      ++o;
      while (nacc >= 8) {  // the last codeword may complete more bytes: the rounds start at < 8 bits
        nacc -= 8;
        *o++ = static_cast<uint8_t>(acc >> nacc);
      }
    } else {
      r.head = static_cast<uint8_t>(acc << (8 - nacc));
      nacc = 0;
    }
    r.has_head = true;
  }
  // Fast loop: a round's codewords are first combined into one bit string, so the accumulator
  // takes one shift and OR per flush; rounds are counted ahead so that no 8-byte store passes
  // `limit` (a flush advances at most kMaxAdvance bytes, and a round's last store ends within
  // kLastStore bytes of where the round starts). With pairs the accumulator keeps its
  // bits right-aligned; with single lookups it keeps them left-aligned (`accl`, the next bits go
  // `nacc` below its top) and the entries are `left`: the codeword left-aligned in 64 bits, its
  // length in the low 6 bits, which an x86 shift reads as its count, so a codeword joins the
  // round with one shift and one OR, and no extraction on the round's critical path.
  constexpr bool kQuads = kPerFlush == kQuadFlush;
  constexpr bool kLeft = kPerFlush == 3 || kPerFlush == 4;  // single lookups: left-aligned accumulator
  constexpr int kFlushSymbols = kLeft ? kPerFlush : 4;      // codewords per flush
  constexpr uint32_t kFlushBits = 48;                       // 2 pairs of <= 24 bits, 4 x 12 or 3 x 16
  static_assert(7 + kFlushBits <= 58, "a flush's bits and the pending ones must stay above the entries' length bits");
  // Flushes per round (the gap bookkeeping is per round): two with pairs and gap arrays, two with
  // quads (a 64-byte vector of input is eight rounds).
  constexpr int kFlushes = (kGaps && kPerFlush == 0) || kQuads ? 2 : 1;
  constexpr int kSymbols = kFlushSymbols * kFlushes;
  constexpr uint32_t kMaxRoundBits = kFlushBits * kFlushes;
  static_assert(kMaxRoundBits < 128, "a round must be shorter than a segment");
  constexpr size_t kMaxAdvance = (7 + kFlushBits) / 8;             // bytes per flush, at most
  constexpr size_t kLastStore = (kFlushes - 1) * kMaxAdvance + 8;  // a round's last store ends within this
  // (pack_quads() may flush a round's eight codewords at once, at most 57 bits: that flush
  // advances at most 8 bytes and its store ends within 8, so both bounds still hold per round.)
  uint32_t round_start[kBlockRounds + 1];
  int32_t last_round[(kBlockRounds * kMaxRoundBits >> 7) + 2];  // per segment of the block
  uint64_t accl = 0;
  if constexpr (kLeft) accl = nacc ? acc << (64 - nacc) : 0;

  for (;;) {
    const size_t room = static_cast<size_t>(limit - o);
    size_t rounds =
        std::min({(n - i) / kSymbols, room >= kLastStore ? (room - kLastStore) / (kFlushes * kMaxAdvance) + 1 : 0, kBlockRounds});
    if constexpr (kQuads) {
      // Whole 64-byte vectors, packed with their gap entries by pack_quads() (AVX-512).
      rounds &= ~size_t{63 / kSymbols};
      if (rounds == 0) break;
      QuadStream qs{acc, nacc, o};
      const uint64_t coded = pack_quads(in + i, rounds * kSymbols, *quad, qs, kGaps ? gap_bytes + (p >> lg) : nullptr,
                                        static_cast<uint32_t>(p & seg_mask), lg);
      acc = qs.acc;
      nacc = qs.nacc;
      o = qs.o;
      if constexpr (kGaps) p += coded;
      i += rounds * kSymbols;
      swap_final_words(static_cast<size_t>(o - be) >> 2);
      continue;
    }
    if (rounds == 0) break;
    const uint8_t* __restrict src = in + i;
    const uint32_t off = static_cast<uint32_t>(p & seg_mask);  // block start within its segment
    uint32_t rel = off;                                        // bit position from that segment
    if constexpr (kGaps) last_round[0] = -1;
    for (size_t k = 0; k < rounds; ++k, src += kSymbols) {
      uint32_t len = 0;
#pragma GCC unroll 2
      for (int f = 0; f < kFlushes; ++f) {
        const uint8_t* __restrict fs = src + f * kFlushSymbols;
        uint64_t bits;
        uint32_t flen;
        if constexpr (!kLeft) {
          uint16_t two0, two1;
          std::memcpy(&two0, fs, 2);
          std::memcpy(&two1, fs + 2, 2);
          // Pair entries: the two codewords' bits above the low byte, their bit count in it.
          const uint32_t ea = pair[two0], eb = pair[two1];
          const uint32_t lb = eb & 0xFF;
          flen = (ea & 0xFF) + lb;
          bits = uint64_t{ea >> 8} << lb | (eb >> 8);
          acc = acc << flen | bits;
          nacc += flen;  // at least kFlushSymbols bits, at most 7 + kFlushBits
          const uint64_t v = __builtin_bswap64(acc << (64 - nacc));
          std::memcpy(o, &v, 8);
          o += nacc >> 3;
          nacc &= 7;
        } else {
          bits = 0;
          flen = 0;
#pragma GCC unroll 4
          for (int j = 0; j < kPerFlush; ++j) {
            const uint64_t e = left[fs[j]];
            bits |= e >> flen;  // the length bits land in the low 6 bits, cleared below
            flen += static_cast<uint32_t>(e & 63);
          }
          bits &= ~uint64_t{63};
          accl |= bits >> nacc;
          nacc += flen;
          const uint64_t v = __builtin_bswap64(accl);
          std::memcpy(o, &v, 8);
          o += nacc >> 3;
          accl <<= nacc & 56;
          nacc &= 7;
        }
        len += flen;
      }
      if constexpr (kGaps) {
        round_start[k] = rel;
        rel += len;
        last_round[rel >> lg] = static_cast<int32_t>(k);
      }
    }
    if constexpr (kGaps) {
      // Boundaries at rel = m*S, m = 1..rel/S: the first round ending at or after m*S is the one
      // after the last round ending in segment m-1; the entry is its first start >= m*S.
      round_start[rounds] = rel;
      const uint8_t* block = in + i;
      const uint64_t k0 = p >> lg;
      for (uint32_t m = 1, nb = rel >> lg; m <= nb; ++m) {
        const uint32_t B = m << lg;
        const size_t k = static_cast<size_t>(last_round[m - 1] + 1);
        const uint8_t* sym = block + k * kSymbols;
        // The round starts before B and ends at or after it; its codeword starts are increasing,
        // so the entry, (first start >= B) - B, is the least of (start - B) taken as unsigned
        // (a start before B wraps to a large value), the round's end counting as a start.
        uint32_t d = round_start[k] - B, gap = round_start[k + 1] - B;
        for (int j = 0; j + 1 < kSymbols; ++j) {
          d += enc[sym[j]] >> 24;
          gap = std::min(gap, d);
        }
        gap_bytes[k0 + m] = static_cast<uint8_t>(gap);
      }
      p += rel - off;
    }
    i += rounds * kSymbols;
    swap_final_words(static_cast<size_t>(o - be) >> 2);  // bytes below o are final
  }
  if constexpr (kLeft) acc = nacc ? accl >> (64 - nacc) : 0;
  for (; i < n; ++i) {
    append(enc[in[i]]);
    while (nacc >= 8) {
      nacc -= 8;
      *o++ = static_cast<uint8_t>(acc >> nacc);
    }
  }
  if (nacc > 0) *o = static_cast<uint8_t>(acc << (8 - nacc));
  swap_final_words(swap_end);
  return r;
}

// Codeword lookups per flush: quads (AVX-512) or pairs for codes of at most 12 bits, else 4
// single lookups for codes of at most 12 bits (4 x 12 + 7 <= 58 bits), else 3 (3 x 16 + 7).
#define HPCNN_PACK_VARIANTS(X) X(0) X(4) X(3) X(1)
#define HPCNN_PACK_FN(K)                                                                                               \
  HPCNN_HOT_TARGET PartResult pack_gaps_##K(const uint8_t* in, size_t n, const uint32_t* enc, const uint64_t* left,    \
                                            const uint32_t* pair, const QuadTables* quad, uint64_t pos, uint64_t end,  \
                                            uint8_t* be, uint8_t* gaps, uint32_t slog2) {                              \
    return pack_part<true, K>(in, n, enc, left, pair, quad, pos, end, be, gaps, slog2);                                \
  }                                                                                                                    \
  HPCNN_HOT_TARGET PartResult pack_plain_##K(const uint8_t* in, size_t n, const uint32_t* enc, const uint64_t* left,   \
                                             const uint32_t* pair, const QuadTables* quad, uint64_t pos, uint64_t end, \
                                             uint8_t* be, uint8_t* gaps, uint32_t slog2) {                             \
    return pack_part<false, K>(in, n, enc, left, pair, quad, pos, end, be, gaps, slog2);                               \
  }
HPCNN_PACK_VARIANTS(HPCNN_PACK_FN)
#undef HPCNN_PACK_FN
static_assert(kQuadFlush == 1, "pack_gaps_1 / pack_plain_1 are the quad variants");

enum class Lookup { quad, pair, single };
using PackFn = PartResult (*)(const uint8_t*, size_t, const uint32_t*, const uint64_t*, const uint32_t*, const QuadTables*,
                              uint64_t, uint64_t, uint8_t*, uint8_t*, uint32_t);
PackFn pick_pack(bool gaps, Lookup lookup, int max_length) {
  switch (lookup) {
    case Lookup::quad:
      return gaps ? pack_gaps_1 : pack_plain_1;
    case Lookup::pair:
      return gaps ? pack_gaps_0 : pack_plain_0;
    default:
      return max_length <= 12 ? (gaps ? pack_gaps_4 : pack_plain_4) : (gaps ? pack_gaps_3 : pack_plain_3);
  }
}

// A codeword left-aligned in 64 bits with its length in the low 6 bits (0 for an absent symbol).
inline uint64_t left_entry(uint32_t enc) {
  const uint32_t len = enc >> 24;
  return len ? uint64_t{enc & 0xFFFFFF} << (64 - len) | len : 0;
}

// Pair table for codes of at most 12 bits: entries only for pairs of the symbols that occur
// (the others are never read), so building it costs nsym^2 stores.
constexpr size_t kPairTableMinBytes = 16 << 10;
// Pairs of a small alphabet stay in the L1/L2 caches; with many symbols the 256 KiB table misses.
constexpr int kPairTableMaxSymbols = 128;
// Codes of at most 12 bits: AVX-512 quads where the CPU has them, else the pair table for a
// large block of few symbols; otherwise single lookups.
Lookup choose_lookup(const BlockPlan& bp, bool quads) {
  if (bp.max_length > 12) return Lookup::single;
  if (quads) return Lookup::quad;
  return bp.n >= kPairTableMinBytes && bp.symbols <= kPairTableMaxSymbols ? Lookup::pair : Lookup::single;
}

void build_pair_row(const std::array<uint32_t, 256>& enc, const uint8_t* present, int nsym, uint32_t b1, uint32_t* pair) {
  const uint32_t e1 = enc[b1], l1 = e1 >> 24;
  for (int k = 0; k < nsym; ++k) {
    const uint32_t b0 = present[k], e0 = enc[b0], l0 = e0 >> 24;
    pair[b0 | b1 << 8] = ((e0 & 0xFFFFFF) << l1 | (e1 & 0xFFFFFF)) << 8 | (l0 + l1);
  }
}

}  // namespace

void encode_chunk(const uint8_t* in, size_t n, const FileHeader& fh, int threads, std::vector<uint8_t>& out) {
  if (n == 0 || n > fh.chunk_size) throw_error(ErrorKind::usage, "encode_chunk: chunk size out of range");
  if (fh.segment_log2 != 7 && fh.segment_log2 != 8)
    throw_error(ErrorKind::usage, "encode_chunk: segment size must be 128 or 256 bits");
  if (fh.version != kVersion)
    throw_error(ErrorKind::usage, "encode_chunk: the encoder writes format version " + std::to_string(kVersion) + " only");
  const int T = static_cast<int>(std::clamp<size_t>(n / kMinPartBytes, 1, static_cast<size_t>(codec_threads(threads))));
  // One histogram per 16 KiB unit (the block splitter's input; their bit counts give the parts'
  // offsets). One thread hashes and counts in one pass, unit by unit while each is in cache;
  // several take the units dynamically while one of them also hashes the chunk.
  const size_t U = block_units(n);
  auto unit_len = [&](size_t u) { return std::min(n, (u + 1) * kBlockUnit) - u * kBlockUnit; };
  const auto units = std::make_unique_for_overwrite<Histogram[]>(U);  // each written whole below
  uint64_t checksum = 0;
  if (T == 1) {
    Checksum64Stream hash;
    UnitCounter counter;
    static_assert(kBlockUnit <= UnitCounter::kMaxUnit);
    for (size_t u = 0; u < U; ++u) {
      hash.add(in + u * kBlockUnit, unit_len(u));
      counter.count(in + u * kBlockUnit, unit_len(u), units[u].data());
    }
    checksum = hash.value();
  } else {
    const std::unique_ptr<UnitCounter[]> counters(new UnitCounter[T]);  // allocated here: nothing throws in the region
#pragma omp parallel num_threads(T)
    {
      UnitCounter& counter = counters[omp_get_thread_num()];
#pragma omp single nowait
      checksum = checksum64(in, n);
#pragma omp for schedule(dynamic, 4)
      for (size_t u = 0; u < U; ++u) counter.count(in + u * kBlockUnit, unit_len(u), units[u].data());
    }
  }
  const ChunkPlan plan = plan_chunk({units.get(), U}, n, fh);
  if (plan.mode == ChunkMode::single_symbol) return write_single_symbol_chunk(plan, n, checksum, out);
  if (plan.mode == ChunkMode::raw) return write_raw_chunk(in, n, checksum, out);
  const auto& lay = plan.layout;
  // Parts: runs of units inside one block (one thread: a block each; several: a few parts per
  // thread, taken dynamically, so that a thread slowed by other work does not hold the chunk up),
  // each starting at the bit offset that the units before it take.
  struct Part {
    size_t begin, end;  // bytes
    uint64_t bit_begin, bit_end;
    int block;
  };
  std::vector<Part> parts;
  const size_t part_units = T == 1 ? U : std::max<size_t>(1, U / (static_cast<size_t>(T) * kPartsPerThread));
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    const BlockPlan& bp = plan.blocks[b];
    uint64_t bit = bp.bit_begin;
    for (size_t u0 = bp.first_unit; u0 < bp.end_unit; u0 += part_units) {
      const size_t u1 = std::min(bp.end_unit, u0 + part_units);
      uint64_t bits = 0;
      if (u0 == bp.first_unit && u1 == bp.end_unit)
        bits = bp.bits;  // the whole block (one thread)
      else
        for (size_t u = u0; u < u1; ++u)
          for (int s = 0; s < 256; ++s) bits += units[u][s] * bp.lengths[s];
      parts.push_back({u0 * kBlockUnit, std::min(n, u1 * kBlockUnit), bit, bit + bits, static_cast<int>(b)});
      bit += bits;
    }
  }
  const int P = static_cast<int>(parts.size());
  const uint64_t total_bits = plan.total_bits;
  begin_huffman_chunk(plan, out);
  const uint64_t nseg = segment_count(total_bits, fh.segment_bits());
  std::vector<uint8_t> gap_bytes(fh.gap_array() ? nseg + 1 : 0, 0);  // + the spare slot
  uint8_t* const be = out.data() + lay.words_offset;
  const size_t stream_bytes = (total_bits + 7) / 8, word_bytes = lay.words_count * 4;
  std::vector<PartResult> results(P);
#pragma omp parallel num_threads(std::min(T, P))
  {
    // Each thread builds its own pair table per block: nsym^2 stores, cheaper than fetching
    // lines another core wrote.
    thread_local std::vector<uint32_t> pair;
    int pair_block = -1, left_block = -1, quad_block = -1;
    uint64_t left[256];
    QuadTables quad;
    const bool quads = quad_pack_available();
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < P; ++t) {
      const Part& pt = parts[t];
      const BlockPlan& bp = plan.blocks[pt.block];
      const Lookup lookup = choose_lookup(bp, quads);
      const bool use_pair = lookup == Lookup::pair;
      if (lookup == Lookup::quad && quad_block != pt.block) {
        make_quad_tables(bp.enc, quad);
        quad_block = pt.block;
      }
      if (use_pair && pair_block != pt.block) {
        pair.resize(65536);
        uint8_t present[256];
        int nsym = 0;
        for (int s = 0; s < 256; ++s)
          if (bp.lengths[s]) present[nsym++] = static_cast<uint8_t>(s);
        for (int k = 0; k < nsym; ++k) build_pair_row(bp.enc, present, nsym, present[k], pair.data());
        pair_block = pt.block;
      }
      if (lookup == Lookup::single && left_block != pt.block) {
        for (int s = 0; s < 256; ++s) left[s] = left_entry(bp.enc[s]);
        left_block = pt.block;
      }
      const PackFn pack = pick_pack(fh.gap_array(), lookup, bp.max_length);
      results[t] = pack(in + pt.begin, pt.end - pt.begin, bp.enc.data(), left, use_pair ? pair.data() : nullptr, &quad,
                        pt.bit_begin, pt.bit_end, be, gap_bytes.data(), fh.segment_log2);
    }
  }
  for (int u = 0; u < P; ++u)
    if (results[u].has_head) be[parts[u].bit_begin >> 3] |= results[u].head;
  std::memset(be + stream_bytes, 0, word_bytes - stream_bytes);
  // The words the parts left: those holding a part boundary or the end of the stream.
  size_t last_swapped = SIZE_MAX;
  for (int u = 0; u < P; ++u) {
    const uint64_t e = parts[u].bit_end;
    const size_t w = static_cast<size_t>(e >> 5);
    if ((e & 31) == 0 || w == last_swapped) continue;
    swap_words_in_place(be + 4 * w, 1);
    last_swapped = w;
  }
  if (fh.gap_array()) {
    // Two 4-bit entries per byte (begin_huffman_chunk zeroed the gap array).
    uint8_t* g = out.data() + lay.gap_offset;
    const uint8_t* gb = gap_bytes.data();
    for (uint64_t j = 0; j < nseg / 2; ++j) g[j] = static_cast<uint8_t>(gb[2 * j] | gb[2 * j + 1] << 4);
    if (nseg & 1) g[nseg / 2] = gb[nseg - 1];
  }
  finish_huffman_chunk(plan, n, checksum, out);
}

}  // namespace hpcnn::huffman
