#include "huffman/cpu/decoder.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "core/error.h"
#include "huffman/bitstream.h"
#include "huffman/chunk_plan.h"
#include "huffman/codebook.h"
#include "huffman/cpu/byte_swap.h"
#include "huffman/cpu/hot.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace hpcnn::huffman {
namespace {

// Lanes decoded together by one thread. Each codeword lookup waits for the previous one of its
// lane (shift, table load, shift: about 7 cycles), so the lanes' independent chains fill the
// core. 6 lanes decoded about 10% faster than 4 on an AMD EPYC (Zen 4) with the root shift held
// in a register; on an Intel Xeon (2026-12-04), with the shift an immediate (one register more
// for the lanes), 7 lanes decoded 5-9% faster than those 6 (8: 5-9%; 5: 7% slower). Seven
// lanes' windows and output pointers and the table do not all fit in the 15 registers: GCC
// spills some, and the extra chains still pay.
constexpr int kInterleave = 7;
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the lane loop reads a table entry's top byte at byte offset 3");
constexpr uint64_t kLaneSlack = 8;  // a lane may write 3 bytes past its last symbol
constexpr int kRootBits = 12;       // first-level table: 4096 entries, 16 KiB
constexpr uint64_t kMinLaneBits = 1 << 14;
// Lanes of about this many bits (32 KiB of stream): a group of seven lanes, its byte-swapped
// words and its output stay in the L2 cache while they are decoded, copied and hashed.
constexpr uint64_t kLaneBits = 1 << 18;
constexpr int kGroupsPerThread = 4;           // with several threads, for balance
constexpr uint64_t kMinThreadBits = 1 << 17;  // less stream than this per thread is not worth one
constexpr uint64_t kStreamOutBytes = 2 << 20;

// One lane: bit range [begin, end) of the stream, decoded into `out`.
struct Lane {
  uint64_t begin = 0, end = 0;
  uint8_t* out = nullptr;
  uint64_t count = 0;  // symbols written
  uint64_t stop = 0;   // bit position after the last codeword decoded
};

// The decoder reads a byte-swapped copy of the words: a big-endian bit stream, so that any bit
// position is one unaligned 64-bit load, a byte swap and a shift away (57 valid bits).
inline uint64_t peek57(const uint8_t* be, uint64_t pos) {
  uint64_t v;
  std::memcpy(&v, be + (pos >> 3), 8);
  return __builtin_bswap64(v) << (pos & 7);
}

// Decodes one symbol from the top bits of v (root table of K bits, second level below it).
// Decodes one table entry (one to three symbols) from the top bits of v. Four output bytes are
// always written (the fourth is junk); the pointer advances by the symbol count. The bit
// position is not tracked here: see the marker bit in decode_lanes_impl.
//
// The entry's top byte (bits consumed | count << 6) is loaded on its own for the shift of v
// rather than extracted from the entry: a load instead of a register copy and a shift, and the
// shift no longer waits for an extraction (x86 shifts use only a count's low 6 bits, so the
// count bits above cost nothing there); the entry itself, once stored, becomes the count in
// place. The empty asm hides that the two loads read the same entry, which GCC would otherwise
// fold back into one. 8 instructions per lookup (the index: a register copy, which renaming
// absorbs, and a shift by an immediate).
#define HPCNN_DECODE_ONE(v, out)                                           \
  do {                                                                     \
    uint64_t i_ = (v) >> root_shift;                                       \
    uint32_t e_ = root[i_];                                                \
    uint32_t m_;                                                           \
    if (kSub && __builtin_expect(entry_is_pointer(e_), 0)) {               \
      const uint32_t width_ = e_ & 31;                                     \
      e_ = sub[pointer_index(e_) + (((v) << root_bits) >> (64 - width_))]; \
      m_ = e_ >> 24;                                                       \
    } else {                                                               \
      asm("" : "+r"(i_));                                                  \
      m_ = root_top[4 * i_];                                               \
    }                                                                      \
    std::memcpy((out), &e_, 4);                                            \
    (out) += e_ >> 30;                                                     \
    (v) <<= m_ & 63;                                                       \
  } while (0)

// A 57-bit window with a marker bit just below it: after the window has been shifted left by
// the c bits consumed, the marker sits at bit 6 + c, so c = ctz(v) - 6.
inline uint64_t window(const uint8_t* be, uint64_t pos) { return (peek57(be, pos) & ~uint64_t{0x7F}) | 0x40; }
inline uint64_t consumed(uint64_t v) { return static_cast<uint64_t>(__builtin_ctzll(v)) - 6; }

// Interleaved rounds over N lanes (positions p, outputs o, ends e): each round decodes kPerLoad
// table entries per lane from one 57-bit window (kPerLoad * L <= 57 keeps every lookup inside
// it), for as long as every lane has room for a whole round.
template <int N, int kPerLoad, bool kSub>
__attribute__((always_inline)) inline void interleaved_rounds(const uint32_t* __restrict root, const uint32_t* __restrict sub,
                                                              const uint8_t* __restrict be, uint64_t* pp, uint8_t** oo,
                                                              const uint64_t* ee) {
  constexpr int root_bits = kRootBits;
  constexpr int root_shift = 64 - kRootBits;
  constexpr uint64_t kBurst = uint64_t{kPerLoad} * kMaxCodeLength;                  // bits a round may consume
  const uint8_t* __restrict root_top = reinterpret_cast<const uint8_t*>(root) + 3;  // entry i's top byte: root_top[4 * i]
  uint64_t p[N], e[N];
  uint8_t* o[N];
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) {
    p[k] = pp[k];
    o[k] = oo[k];
    e[k] = ee[k];
  }
  for (;;) {
    uint64_t room = UINT64_MAX;
#pragma GCC unroll 8
    for (int k = 0; k < N; ++k) room = std::min(room, e[k] > p[k] ? e[k] - p[k] : 0);
    uint64_t rounds = room / kBurst;
    if (rounds == 0) break;
    for (; rounds; --rounds) {
      uint64_t v[N];
#pragma GCC unroll 8
      for (int k = 0; k < N; ++k) v[k] = window(be, p[k]);
#pragma GCC unroll 8
      for (int j = 0; j < kPerLoad; ++j) {
#pragma GCC unroll 8
        for (int k = 0; k < N; ++k) HPCNN_DECODE_ONE(v[k], o[k]);
      }
#pragma GCC unroll 8
      for (int k = 0; k < N; ++k) p[k] += consumed(v[k]);
    }
  }
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) {
    pp[k] = p[k];
    oo[k] = o[k];
  }
}

// Decodes n <= kInterleave lanes. When a lane runs out of room for a whole round it is finished
// one codeword at a time and the others go on interleaved, so lanes that consume their bits at
// different rates (regions of different entropy) still spend most of their time in the fast
// rounds.
template <int kPerLoad, bool kSub>
__attribute__((always_inline)) inline void decode_lanes_impl(const DecodeTable& t, const uint8_t* __restrict be, Lane* lanes,
                                                             int n) {
  const uint8_t* __restrict lengths = t.lengths.data();
  const uint32_t* __restrict root = t.root.data();
  const uint32_t* __restrict sub = t.sub.data();
  constexpr int root_bits = kRootBits;
  constexpr int root_shift = 64 - kRootBits;
  constexpr uint64_t kBurst = uint64_t{kPerLoad} * kMaxCodeLength;
  uint64_t p[kInterleave], e[kInterleave];
  uint8_t* o[kInterleave];
  int lane[kInterleave];
  int active = n;
  for (int i = 0; i < n; ++i) {
    p[i] = lanes[i].begin;
    o[i] = lanes[i].out;
    e[i] = lanes[i].end;
    lane[i] = i;
  }
  while (active > 0) {
    switch (active) {
      case 7:
        interleaved_rounds<7, kPerLoad, kSub>(root, sub, be, p, o, e);
        break;
      case 6:
        interleaved_rounds<6, kPerLoad, kSub>(root, sub, be, p, o, e);
        break;
      case 5:
        interleaved_rounds<5, kPerLoad, kSub>(root, sub, be, p, o, e);
        break;
      case 4:
        interleaved_rounds<4, kPerLoad, kSub>(root, sub, be, p, o, e);
        break;
      case 3:
        interleaved_rounds<3, kPerLoad, kSub>(root, sub, be, p, o, e);
        break;
      case 2:
        interleaved_rounds<2, kPerLoad, kSub>(root, sub, be, p, o, e);
        break;
      default:
        interleaved_rounds<1, kPerLoad, kSub>(root, sub, be, p, o, e);
        break;
    }
    int kept = 0;
    for (int k = 0; k < active; ++k) {
      if (e[k] > p[k] && e[k] - p[k] >= kBurst) {  // still room for a round: keep interleaving
        p[kept] = p[k];
        o[kept] = o[k];
        e[kept] = e[k];
        lane[kept] = lane[k];
        ++kept;
        continue;
      }
      uint64_t pos = p[k];
      uint8_t* out = o[k];
      while (pos < e[k]) {
        // One codeword at a time: later codewords of a multi-symbol entry may belong to the next lane.
        const uint64_t v = peek57(be, pos);
        uint32_t en = root[v >> root_shift];
        if (entry_is_pointer(en)) en = sub[pointer_index(en) + ((v << root_bits) >> (64 - (en & 31)))];
        *out++ = static_cast<uint8_t>(en);
        pos += lengths[en & 0xFF];
      }
      Lane& l = lanes[lane[k]];
      l.stop = pos;
      l.count = static_cast<uint64_t>(out - l.out);
    }
    active = kept;
  }
}
#undef HPCNN_DECODE_ONE

// Codes of at most kRootBits bits need no second-level lookup (the default L = 12).
HPCNN_HOT_TARGET HPCNN_NO_SLP void decode_lanes_short(const DecodeTable& t, const uint8_t* be, Lane* lanes, int n) {
  decode_lanes_impl<4, false>(t, be, lanes, n);
}
HPCNN_HOT_TARGET HPCNN_NO_SLP void decode_lanes_4(const DecodeTable& t, const uint8_t* be, Lane* lanes, int n) {
  decode_lanes_impl<4, true>(t, be, lanes, n);
}
HPCNN_HOT_TARGET HPCNN_NO_SLP void decode_lanes_3(const DecodeTable& t, const uint8_t* be, Lane* lanes, int n) {
  decode_lanes_impl<3, true>(t, be, lanes, n);
}
void decode_lanes(const DecodeTable& t, const uint8_t* be, Lane* lanes, int n) {
  if (t.max_length <= kRootBits)
    decode_lanes_short(t, be, lanes, n);
  else if (t.max_length <= 14)
    decode_lanes_4(t, be, lanes, n);
  else
    decode_lanes_3(t, be, lanes, n);
}

// Decodes a group of n consecutive lanes (one bit range of the stream): its words are first
// byte-swapped into `buf` (a big-endian copy, zero-padded, so that any bit position is one
// unaligned load away), then the lanes are decoded from it.
void decode_group(const DecodeTable& t, const uint8_t* src_words, uint64_t nwords, Lane* lanes, int n,
                  std::vector<uint32_t>& buf) {
  const uint64_t w0 = lanes[0].begin >> 5, w1 = std::min<uint64_t>(nwords, (lanes[n - 1].end + 31) >> 5);
  buf.resize(w1 - w0 + 4);
  uint32_t* b = buf.data();
  swap_words(src_words + 4 * w0, w1 - w0, b);
  for (uint64_t w = w1 - w0; w < buf.size(); ++w) b[w] = 0;
  const uint64_t base = w0 << 5;
  for (int i = 0; i < n; ++i) {
    lanes[i].begin -= base;
    lanes[i].end -= base;
  }
  decode_lanes(t, reinterpret_cast<const uint8_t*>(b), lanes, n);
  for (int i = 0; i < n; ++i) {
    lanes[i].begin += base;
    lanes[i].end += base;
    lanes[i].stop += base;
  }
}

// Lane outputs into place: 32-byte moves (glibc's memcpy takes `rep movsb` for these sizes,
// which was slower here: the copy took about twice as long). kStream: non-temporal stores from the
// first 32-byte boundary of the destination (no reads for ownership of output lines that are not
// in the cache), for output the caller does not read back soon.
#if defined(__x86_64__) && defined(__GNUC__)
template <bool kStream>
__attribute__((target("avx2"))) void copy_out_avx2(uint8_t* __restrict d, const uint8_t* __restrict s, size_t n) {
  size_t i = kStream ? std::min(n, static_cast<size_t>(-reinterpret_cast<uintptr_t>(d) & 31)) : 0;
  std::memcpy(d, s, i);
  for (; i + 64 <= n; i += 64) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    if constexpr (kStream) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), a);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    }
  }
  std::memcpy(d + i, s + i, n - i);
  if constexpr (kStream) _mm_sfence();  // ordered before whatever the caller does next
  _mm256_zeroupper();
}
void copy_out(uint8_t* d, const uint8_t* s, size_t n, bool stream) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (!avx2)
    std::memcpy(d, s, n);
  else if (stream)
    copy_out_avx2<true>(d, s, n);
  else
    copy_out_avx2<false>(d, s, n);
}
#else
void copy_out(uint8_t* d, const uint8_t* s, size_t n, bool) { std::memcpy(d, s, n); }
#endif

}  // namespace

void decode_chunk(const ChunkHeader& h, const uint8_t* chunk, const FileHeader& fh, int threads, uint8_t* out,
                  DecoderScratch& scratch, uint64_t index, uint64_t offset) {
  const std::string where = chunk_where(index, offset);
  const uint8_t* payload = chunk + kChunkHeaderSize;
  switch (h.mode) {
    case ChunkMode::raw:
      std::memcpy(out, payload, h.original_length);
      break;
    case ChunkMode::single_symbol:
      std::memset(out, payload[0], h.original_length);
      break;
    case ChunkMode::huffman: {
      size_t table_size = 0;
      const std::vector<CodeBlock> blocks = read_code_blocks(h, payload, h.payload_length, fh, &table_size, index, offset);
      const PayloadLayout lay = huffman_layout(table_size, h.bit_length, fh);
      if (lay.payload_length != h.payload_length)
        throw_error(ErrorKind::bad_input, "payload length " + std::to_string(h.payload_length) +
                                              " does not match its bit length and tables (" + std::to_string(lay.payload_length) +
                                              ") " + where);
      if (checksum32(chunk + kChunkHeaderSize, lay.words_offset - kChunkHeaderSize) != h.meta_checksum)
        throw_error(ErrorKind::bad_input, "code table or gap array checksum mismatch " + where);
      check_bitstream_padding(chunk + lay.words_offset, lay.words_count, h.bit_length, where);
      const uint32_t S = fh.segment_bits();
      const uint64_t nseg = segment_count(h.bit_length, S);
      const uint8_t* gaps = chunk + lay.gap_offset;
      const uint8_t* src_words = chunk + lay.words_offset;
      const uint64_t nwords = lay.words_count;

      // Lanes: every code block starts one (its first bit is a codeword boundary), and the
      // segments inside a block split it further at their gap-array boundaries. The chunk gets
      // a few groups of kInterleave lanes per thread when there are several threads, about
      // kLaneBits each when it is large, at least kMinLaneBits; each block its share by bits, in
      // groups of kInterleave interleaved lanes (whole groups when it has more).
      const int threads_wanted = codec_threads(threads);
      uint64_t want_total = 1;
      if (fh.gap_array())
        want_total =
            std::max<uint64_t>(static_cast<uint64_t>(threads_wanted) * kInterleave * (threads_wanted > 1 ? kGroupsPerThread : 1),
                               h.bit_length / kLaneBits);
      auto boundary = [&](uint64_t k) -> uint64_t {
        if (k >= nseg) return h.bit_length;
        const uint64_t b = k * S + read_gap(gaps, k);
        if (b > h.bit_length)
          throw_error(ErrorKind::bad_input, "gap entry of segment " + std::to_string(k) + " points past the bitstream " + where);
        return b;
      };
      struct Group {
        int first, last, block;
      };
      std::vector<Lane> lanes;
      std::vector<Group> group_list;
      std::vector<int> lane_block;
      for (size_t bi = 0; bi < blocks.size(); ++bi) {
        const CodeBlock& cb = blocks[bi];
        const uint64_t b0 = cb.bit_begin, b1 = cb.bit_begin + cb.bits;
        const uint64_t k0 = (b0 + S - 1) / S, k1 = (b1 + S - 1) / S;  // segments starting inside the block
        int nl = 1;
        if (fh.gap_array() && k1 > k0 + 1) {
          const uint64_t share = std::max<uint64_t>(1, (want_total * cb.bits + h.bit_length - 1) / h.bit_length);
          nl = static_cast<int>(std::clamp<uint64_t>(cb.bits / kMinLaneBits, 1, std::min<uint64_t>(share, k1 - k0)));
          if (nl < kInterleave && k1 - k0 >= kInterleave) nl = kInterleave;
          if (nl > kInterleave) nl -= nl % kInterleave;
        }
        const int base = static_cast<int>(lanes.size());
        uint64_t prev_end = b0;
        for (int i = 0; i < nl; ++i) {
          Lane l;
          // Lane i takes the segments [k0 + (k1-k0)*i/nl, ...): it starts at the first codeword
          // boundary at or after its first segment's start (the block's start for lane 0).
          const uint64_t s0 = k0 + (k1 - k0) * i / nl, s1 = k0 + (k1 - k0) * (i + 1) / nl;
          l.begin = i == 0 ? b0 : boundary(s0);
          l.end = i + 1 == nl ? b1 : boundary(s1);
          if (l.begin != prev_end || l.end < l.begin || l.end > b1)
            throw_error(ErrorKind::bad_input, "gap entries of segments " + std::to_string(s0) + " and " + std::to_string(s1) +
                                                  " are inconsistent with block " + std::to_string(bi) + " (bits " +
                                                  std::to_string(b0) + ".." + std::to_string(b1) + ") " + where);
          prev_end = l.end;
          lanes.push_back(l);
          lane_block.push_back(static_cast<int>(bi));
        }
        for (int g = base; g < base + nl; g += kInterleave)
          group_list.push_back({g, std::min(base + nl, g + kInterleave), static_cast<int>(bi)});
      }
      auto capacity = [&](int i) {
        const Lane& l = lanes[i];
        return (l.end - l.begin) / static_cast<uint64_t>(blocks[lane_block[i]].min_length) + kLaneSlack;
      };
      auto check_lane = [&](int i) {
        if (lanes[i].stop != lanes[i].end)
          throw_error(ErrorKind::bad_input, "corrupt bitstream or gap array: lane " + std::to_string(i) + " (block " +
                                                std::to_string(lane_block[i]) + ") ends at bit " + std::to_string(lanes[i].stop) +
                                                " instead of " + std::to_string(lanes[i].end) + " " + where);
      };
      auto check_count = [&](uint64_t decoded) {
        if (decoded != h.original_length)
          throw_error(ErrorKind::bad_input, "decoded " + std::to_string(decoded) + " symbols, the chunk header says " +
                                                std::to_string(h.original_length) + " " + where);
      };
      const int groups = static_cast<int>(group_list.size());
      const int T =
          std::min({codec_threads(threads), groups, static_cast<int>(std::max<uint64_t>(1, h.bit_length / kMinThreadBits))});
      // Thread 0 takes groups from the front of the chunk, in order, copies each group's output
      // into place and hashes it while it is still in cache. The other threads take groups
      // from the back, each output placed right below the previous back group's, so a thread
      // slowed by other work holds nothing up and no thread reads another's scratch (back groups
      // are placed in order from the top; a thread waits for the group above its own). Output
      // ranges are reserved under the lock, so corrupt counts can never make two threads write
      // the same bytes. Once all threads are done, thread 0 hashes the back part.
      auto group_lanes = [&](int g) { return std::pair<int, int>(group_list[g].first, group_list[g].last); };
      uint64_t group_cap = 0;
      for (int g = 0; g < groups; ++g) {
        uint64_t c = 0;
        for (int i = group_lanes(g).first; i < group_lanes(g).second; ++i) c += capacity(i);
        group_cap = std::max(group_cap, c);
      }
      scratch.lanes.resize(std::max<size_t>(scratch.lanes.size(), group_cap * static_cast<uint64_t>(T) + 16));
      std::mutex claim;
      std::condition_variable placed;
      int front = 0, back = groups;                          // groups [front, back) are unclaimed
      int next_back = groups - 1;                            // the next back group to place
      uint64_t front_out = 0, back_out = h.original_length;  // bytes [front_out, back_out) unwritten
      int failed_lane = -1;         // the first lane found bad (or, with count_overflow, its group's first)
      bool count_overflow = false;  // a group decoded more symbols than fit
      bool out_of_memory = false;
      uint64_t overflow_total = 0;
      Checksum64Stream hash;  // thread 0's
      // Non-temporal stores for outputs larger than the L2 cache: no reads for ownership of lines
      // that are not cached; a small output stays in the cache for whoever reads it next (with
      // streaming stores files of 100 KB decoded 4-9% slower, 4 MiB chunks up to 4% faster).
      const bool stream_out = h.original_length >= kStreamOutBytes;
#pragma omp parallel num_threads(T)
      {
        thread_local std::vector<uint32_t> words;
        // Each thread builds its own lookup table (in parallel, and decoding then never waits
        // for cache lines another core wrote).
        // (one block's at a time: groups are taken in order, so a thread rebuilds it only
        // when it reaches the next block).
        thread_local DecodeTable table;
        int table_block = -1;
        const int t = omp_get_thread_num();
        uint8_t* const buf = scratch.lanes.data() + group_cap * static_cast<uint64_t>(t);
        for (;;) {
          int g;
          {
            std::lock_guard<std::mutex> lock(claim);
            if (front == back || failed_lane >= 0) break;
            g = t == 0 ? front++ : --back;
          }
          const auto [first, last] = group_lanes(g);
          uint64_t o = 0;
          for (int i = first; i < last; ++i) {
            lanes[i].out = buf + o;
            o += capacity(i);
          }
          // On one thread the group's first lane starts where the output so far ends: it is
          // decoded in place (it may write up to its capacity, bytes the next lanes' copies
          // overwrite), and only the other lanes' outputs are copied.
          const bool in_place = T == 1 && capacity(first) <= h.original_length - front_out;
          if (in_place) lanes[first].out = out + front_out;
          try {
            if (table_block != group_list[g].block) {
              build_decode_table(blocks[group_list[g].block].lengths, kRootBits, /*multi=*/true, table);
              table_block = group_list[g].block;
            }
            decode_group(table, src_words, nwords, lanes.data() + first, last - first, words);
          } catch (const std::bad_alloc&) {  // nothing may leave the parallel region
            std::lock_guard<std::mutex> lock(claim);
            out_of_memory = true;
            if (failed_lane < 0 || first < failed_lane) failed_lane = first;
            placed.notify_all();
            break;
          }
          uint64_t count = 0;
          int bad = -1;
          for (int i = first; i < last; ++i) {
            count += lanes[i].count;
            if (bad < 0 && lanes[i].stop != lanes[i].end) bad = i;
          }
          uint64_t at = 0;
          {
            std::unique_lock<std::mutex> lock(claim);
            // Back groups are placed in order from the top: wait for the one above.
            if (t != 0) placed.wait(lock, [&] { return next_back == g || failed_lane >= 0; });
            if (t != 0 && failed_lane >= 0 && next_back != g) break;
            if (bad >= 0 || count > back_out - front_out) {
              if (failed_lane < 0 || (bad >= 0 ? bad : first) < failed_lane) {
                failed_lane = bad >= 0 ? bad : first;
                count_overflow = bad < 0;
                overflow_total = front_out + (h.original_length - back_out) + count;
              }
              placed.notify_all();
              break;
            }
            if (t == 0) {
              at = front_out;
              front_out += count;
            } else {
              back_out -= count;
              at = back_out;
              --next_back;
              placed.notify_all();
            }
          }
          for (int i = first; i < last; ++i) {
            // Thread 0 hashes each lane's output where it is in cache (the in-place lane's is
            // already in place); a large chunk's output is streamed into place by thread 0 (its
            // lines would not stay in the cache anyway).
            const bool placed_already = in_place && i == first;
            if (t == 0) hash.add(placed_already ? out + at : lanes[i].out, lanes[i].count);
            if (!placed_already) copy_out(out + at, lanes[i].out, lanes[i].count, t == 0 && stream_out);
            at += lanes[i].count;
          }
        }
      }
      const bool complete = failed_lane < 0 && front_out == back_out;
      if (complete) hash.add(out + back_out, h.original_length - back_out);
      const uint64_t digest = hash.value();
      if (out_of_memory) throw std::bad_alloc();
      if (failed_lane >= 0) {
        if (!count_overflow) check_lane(failed_lane);
        check_count(overflow_total);
      }
      check_count(front_out + (h.original_length - back_out));
      if (digest != h.checksum)
        throw_error(ErrorKind::bad_input, "checksum mismatch: the decoded chunk differs from the original " + where);
      return;
      break;
    }
    default:
      throw_error(ErrorKind::bad_input, "cannot decode chunk mode " + std::to_string(static_cast<int>(h.mode)) + " " + where);
  }
  if (checksum64(out, h.original_length) != h.checksum)
    throw_error(ErrorKind::bad_input, "checksum mismatch: the decoded chunk differs from the original " + where);
}

}  // namespace hpcnn::huffman
