#include "huffman/cpu/decoder.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <utility>
#include <new>
#include <string>

#include "core/error.h"
#include "core/xxhash.h"
#include "huffman/bitstream.h"

#include "huffman/codebook.h"
#include "huffman/cpu/hot.h"

namespace hpcnn::huffman {
namespace {

constexpr int kInterleave = 4;          // lanes decoded together by one thread
constexpr uint64_t kLaneSlack = 8;       // a lane may write 3 bytes past its last symbol
constexpr int kRootBits = 12;           // first-level table: 4096 entries, 16 KiB
constexpr uint64_t kMinLaneBits = 1 << 14;
// Lanes of about this many bits (32 KiB of stream): a group of four lanes, its byte-swapped
// words and its output stay in the L2 cache while they are decoded, copied and hashed.
constexpr uint64_t kLaneBits = 1 << 18;
constexpr int kGroupsPerThread = 4;  // with several threads, for balance
constexpr uint64_t kMinThreadBits = 1 << 17;  // less stream than this per thread is not worth one

// One lane: bit range [begin, end) of the stream, decoded into `out`.
struct Lane {
  uint64_t begin = 0, end = 0;
  uint8_t* out = nullptr;
  uint64_t count = 0;    // symbols written
  uint64_t stop = 0;     // bit position after the last codeword decoded
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
#define HPCNN_DECODE_ONE(v, out)                                                    \
  do {                                                                              \
    uint32_t e_ = root[(v) >> root_shift];                                          \
    if (kSub && __builtin_expect(entry_is_pointer(e_), 0)) {                        \
      const uint32_t width_ = e_ & 31;                                              \
      e_ = sub[pointer_index(e_) + (((v) << root_bits) >> (64 - width_))];          \
    }                                                                               \
    std::memcpy((out), &e_, 4);                                                     \
    (out) += e_ >> 30;                                                              \
    (v) <<= (e_ >> 24) & 63;                                                        \
  } while (0)

// A 57-bit window with a marker bit just below it: after the window has been shifted left by
// the c bits consumed, the marker sits at bit 6 + c, so c = ctz(v) - 6.
inline uint64_t window(const uint8_t* be, uint64_t pos) { return (peek57(be, pos) & ~uint64_t{0x7F}) | 0x40; }
inline uint64_t consumed(uint64_t v) { return static_cast<uint64_t>(__builtin_ctzll(v)) - 6; }

// kPerLoad symbols from one 57-bit window: kPerLoad * L <= 57 keeps every lookup inside it.
template <int kPerLoad, bool kSub>
__attribute__((always_inline)) inline void decode_lanes_impl(const DecodeTable& t, const uint8_t* __restrict be, Lane* lanes, int n) {
  const uint8_t* __restrict lengths = t.lengths.data();
  const uint32_t* __restrict root = t.root.data();
  const uint32_t* __restrict sub = t.sub.data();
  constexpr int root_bits = kRootBits;
  constexpr int root_shift = 64 - kRootBits;
  constexpr uint64_t kBurst = uint64_t{kPerLoad} * kMaxCodeLength;  // bits a burst may consume
  uint64_t p[kInterleave] = {};
  uint8_t* o[kInterleave] = {};
  for (int i = 0; i < n; ++i) {
    p[i] = lanes[i].begin;
    o[i] = lanes[i].out;
  }
  if (n == kInterleave) {
    uint64_t p0 = p[0], p1 = p[1], p2 = p[2], p3 = p[3];
    uint8_t *o0 = o[0], *o1 = o[1], *o2 = o[2], *o3 = o[3];
    const uint64_t e0 = lanes[0].end, e1 = lanes[1].end, e2 = lanes[2].end, e3 = lanes[3].end;
    for (;;) {
      const uint64_t room = std::min(std::min(e0 > p0 ? e0 - p0 : 0, e1 > p1 ? e1 - p1 : 0),
                                     std::min(e2 > p2 ? e2 - p2 : 0, e3 > p3 ? e3 - p3 : 0));
      uint64_t rounds = room / kBurst;
      if (rounds == 0) break;
      for (; rounds; --rounds) {
        uint64_t v0 = window(be, p0), v1 = window(be, p1), v2 = window(be, p2), v3 = window(be, p3);
#pragma GCC unroll 4
        for (int k = 0; k < kPerLoad; ++k) {
          HPCNN_DECODE_ONE(v0, o0);
          HPCNN_DECODE_ONE(v1, o1);
          HPCNN_DECODE_ONE(v2, o2);
          HPCNN_DECODE_ONE(v3, o3);
        }
        p0 += consumed(v0);
        p1 += consumed(v1);
        p2 += consumed(v2);
        p3 += consumed(v3);
      }
    }
    p[0] = p0; p[1] = p1; p[2] = p2; p[3] = p3;
    o[0] = o0; o[1] = o1; o[2] = o2; o[3] = o3;
  }
  for (int i = 0; i < n; ++i) {
    uint64_t pos = p[i];
    uint8_t* out = o[i];
    const uint64_t end = lanes[i].end;
    while (pos < end) {
      // One codeword at a time: later codewords of a multi-symbol entry may belong to the next lane.
      const uint64_t v = peek57(be, pos);
      uint32_t e = root[v >> root_shift];
      if (entry_is_pointer(e)) e = sub[pointer_index(e) + ((v << root_bits) >> (64 - (e & 31)))];
      *out++ = static_cast<uint8_t>(e);
      pos += lengths[e & 0xFF];
    }
    lanes[i].stop = pos;
    lanes[i].count = static_cast<uint64_t>(out - lanes[i].out);
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
  if (t.max_length <= kRootBits) decode_lanes_short(t, be, lanes, n);
  else if (t.max_length <= 14) decode_lanes_4(t, be, lanes, n);
  else decode_lanes_3(t, be, lanes, n);
}

// Decodes a group of n consecutive lanes (one bit range of the stream): its words are first
// byte-swapped into `buf` (a big-endian copy, zero-padded, so that any bit position is one
// unaligned load away), then the lanes are decoded from it.
void decode_group(const DecodeTable& t, const uint8_t* src_words, uint64_t nwords, Lane* lanes, int n, std::vector<uint32_t>& buf) {
  const uint64_t w0 = lanes[0].begin >> 5, w1 = std::min<uint64_t>(nwords, (lanes[n - 1].end + 31) >> 5);
  buf.resize(w1 - w0 + 4);
  uint32_t* b = buf.data();
  for (uint64_t w = w0; w < w1; ++w) {
    uint32_t v;
    std::memcpy(&v, src_words + 4 * w, 4);
    b[w - w0] = __builtin_bswap32(v);
  }
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

}  // namespace

void decode_chunk(const ChunkHeader& h, const uint8_t* chunk, const FileHeader& fh, int threads, uint8_t* out,
                  DecoderScratch& scratch, uint64_t index, uint64_t offset) {
  const std::string where = chunk_where(index, offset);
  const uint8_t* payload = chunk + kChunkHeaderSize;
  switch (h.mode) {
    case ChunkMode::raw: std::memcpy(out, payload, h.original_length); break;
    case ChunkMode::single_symbol: std::memset(out, payload[0], h.original_length); break;
    case ChunkMode::huffman: {
      size_t table_size = 0;
      const CodeLengths lengths = read_code_table(payload, h.payload_length, fh.code_limit, &table_size,
                                                  "in chunk " + std::to_string(index) + " at byte offset " + std::to_string(offset + kChunkHeaderSize));
      const PayloadLayout lay = huffman_layout(table_size, h.bit_length, fh);
      if (lay.payload_length != h.payload_length)
        throw_error(ErrorKind::bad_input, "payload length " + std::to_string(h.payload_length) + " does not match its bit length and tables (" +
                                              std::to_string(lay.payload_length) + ") " + where);
      if (checksum32(chunk + kChunkHeaderSize, lay.words_offset - kChunkHeaderSize) != h.meta_checksum)
        throw_error(ErrorKind::bad_input, "code table or gap array checksum mismatch " + where);
      check_bitstream_padding(chunk + lay.words_offset, lay.words_count, h.bit_length, where);
      const DecodeTable table = build_decode_table(lengths, kRootBits, /*multi=*/true);
      const uint32_t S = fh.segment_bits();
      const uint64_t nseg = segment_count(h.bit_length, S);
      const uint8_t* gaps = chunk + lay.gap_offset;
      const uint8_t* src_words = chunk + lay.words_offset;
      const uint64_t nwords = lay.words_count;

      // Lanes: contiguous segment ranges starting at gap-array boundaries, in groups of four
      // (interleaved even when small): a few groups per thread when there are several, about
      // kLaneBits each when the chunk is large, at least kMinLaneBits.
      int nlanes = 1;
      if (fh.gap_array()) {
        const int T = codec_threads(threads);
        const uint64_t want = std::max<uint64_t>(static_cast<uint64_t>(T) * kInterleave * (T > 1 ? kGroupsPerThread : 1), h.bit_length / kLaneBits);
        nlanes = static_cast<int>(std::clamp<uint64_t>(h.bit_length / kMinLaneBits, 1, std::min<uint64_t>(want, nseg)));
        if (nlanes < kInterleave && nseg >= kInterleave) nlanes = kInterleave;
        if (nlanes > kInterleave) nlanes -= nlanes % kInterleave;  // whole groups: all interleaved
      }
      std::vector<Lane> lanes(nlanes);
      auto boundary = [&](uint64_t k) -> uint64_t {
        if (k >= nseg) return h.bit_length;
        const uint64_t b = k * S + read_gap(gaps, k);
        if (b > h.bit_length)
          throw_error(ErrorKind::bad_input, "gap entry of segment " + std::to_string(k) + " points past the bitstream " + where);
        return b;
      };
      auto capacity = [&](const Lane& l) { return (l.end - l.begin) / table.min_length + kLaneSlack; };
      for (int i = 0; i < nlanes; ++i) {
        const uint64_t seg0 = nseg * i / nlanes, seg1 = nseg * (i + 1) / nlanes;
        lanes[i].begin = nlanes == 1 ? 0 : boundary(seg0);
        lanes[i].end = nlanes == 1 ? h.bit_length : boundary(seg1);
        if (lanes[i].end < lanes[i].begin)
          throw_error(ErrorKind::bad_input, "gap entries of segments " + std::to_string(seg0) + " and " + std::to_string(seg1) + " are inconsistent " + where);
      }
      auto check_lane = [&](int i) {
        if (lanes[i].stop != lanes[i].end)
          throw_error(ErrorKind::bad_input, "corrupt bitstream or gap array: lane " + std::to_string(i) + " ends at bit " +
                                                std::to_string(lanes[i].stop) + " instead of " + std::to_string(lanes[i].end) + " " + where);
      };
      auto check_count = [&](uint64_t decoded) {
        if (decoded != h.original_length)
          throw_error(ErrorKind::bad_input, "decoded " + std::to_string(decoded) + " symbols, the chunk header says " +
                                                std::to_string(h.original_length) + " " + where);
      };
      const int groups = (nlanes + kInterleave - 1) / kInterleave;
      const int T = std::min({codec_threads(threads), groups, static_cast<int>(std::max<uint64_t>(1, h.bit_length / kMinThreadBits))});
      // Thread 0 takes groups from the front of the chunk, in order, so it copies each group's
      // output into place and hashes it while it is still in cache. The other threads take
      // groups from the back into scratch, so a thread slowed by other work holds nothing up.
      // Once the counts are known, thread 0 hashes the back groups' outputs in order while the
      // others move them into place.
      auto group_lanes = [&](int g) { return std::pair<int, int>(g * kInterleave, std::min(nlanes, (g + 1) * kInterleave)); };
      uint64_t group_cap = 0;
      std::vector<uint64_t> slot(nlanes + 1, 0);  // the lanes' scratch offsets after thread 0's buffer
      for (int g = 0; g < groups; ++g) {
        uint64_t c = 0;
        for (int i = group_lanes(g).first; i < group_lanes(g).second; ++i) {
          c += capacity(lanes[i]);
          slot[i + 1] = slot[i] + capacity(lanes[i]);
        }
        group_cap = std::max(group_cap, c);
      }
      const uint64_t cap_total = slot[nlanes];
      // Thread 0's group buffer, then a slot per lane for the others (when there are others).
      scratch.lanes.resize(std::max<size_t>(scratch.lanes.size(), group_cap + (T > 1 ? cap_total : 0) + 16));
      std::mutex claim;
      int front = 0, back = groups;  // groups [front, back) are unclaimed
      XXH3_state_t* st = XXH3_createState();
      if (!st) throw std::bad_alloc();
      XXH3_64bits_reset(st);
      uint64_t done = 0;           // bytes thread 0 has put in place
      int bad_lane = -1;           // thread 0: the lane that failed
      int later = nlanes;          // first lane not decoded by thread 0
      std::atomic<int> next_copy{nlanes};
      std::vector<uint64_t> dst(nlanes + 1, 0);
      bool consistent = true;
#pragma omp parallel num_threads(T)
      {
        thread_local std::vector<uint32_t> words;
        const int t = omp_get_thread_num();
        for (;;) {
          int g;
          {
            std::lock_guard<std::mutex> lock(claim);
            if (front == back || (t == 0 && bad_lane >= 0)) break;
            g = t == 0 ? front++ : --back;
          }
          const auto [first, last] = group_lanes(g);
          uint64_t o = t == 0 ? 0 : group_cap + slot[first];
          for (int i = first; i < last; ++i) {
            lanes[i].out = scratch.lanes.data() + o;
            o += capacity(lanes[i]);
          }
          decode_group(table, src_words, nwords, lanes.data() + first, last - first, words);
          if (t == 0) {
            for (int i = first; i < last; ++i) {
              if (lanes[i].stop != lanes[i].end || lanes[i].count > h.original_length - done) {
                bad_lane = i;
                break;
              }
              std::memcpy(out + done, lanes[i].out, lanes[i].count);
              XXH3_64bits_update(st, out + done, lanes[i].count);
              done += lanes[i].count;
            }
          }
        }
#pragma omp barrier
#pragma omp single
        {
          later = bad_lane >= 0 ? nlanes : std::min(nlanes, front * kInterleave);
          next_copy = later;
          dst[later] = done;
          consistent = bad_lane < 0;
          for (int i = later; i < nlanes; ++i) {
            consistent = consistent && lanes[i].stop == lanes[i].end;
            dst[i + 1] = dst[i] + lanes[i].count;
          }
          consistent = consistent && dst[nlanes] == h.original_length;
        }
        if (consistent) {
          if (t == 0) {
            for (int i = later; i < nlanes; ++i) XXH3_64bits_update(st, lanes[i].out, lanes[i].count);
          } else {
            for (int i; (i = next_copy.fetch_add(1)) < nlanes;) std::memcpy(out + dst[i], lanes[i].out, lanes[i].count);
          }
        }
      }
      const uint64_t digest = XXH3_64bits_digest(st);
      XXH3_freeState(st);
      if (bad_lane >= 0) {
        check_lane(bad_lane);
        check_count(done + lanes[bad_lane].count);
      }
      for (int i = later; i < nlanes; ++i) check_lane(i);
      check_count(dst[nlanes]);
      if (digest != h.checksum)
        throw_error(ErrorKind::bad_input, "checksum mismatch: the decoded chunk differs from the original " + where);
      return;
      break;
    }
    default: throw_error(ErrorKind::bad_input, "cannot decode chunk mode " + std::to_string(static_cast<int>(h.mode)) + " " + where);
  }
  if (checksum64(out, h.original_length) != h.checksum)
    throw_error(ErrorKind::bad_input, "checksum mismatch: the decoded chunk differs from the original " + where);
}

}  // namespace hpcnn::huffman
