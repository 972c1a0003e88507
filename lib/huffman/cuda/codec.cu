// CUDA kernels and host driver of the huffgpu codec; see codec.h.
#include <cuda_runtime.h>

#include <cstring>
#include <cub/block/block_scan.cuh>
#include <string>

#include "core/cuda_check.h"
#include "core/error.h"
#include "huffman/bitstream.h"
#include "huffman/block_split.h"
#include "huffman/chunk_plan.h"
#include "huffman/codebook.h"
#include "huffman/cuda/codec.h"

namespace hpcnn::huffman::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kItems = 16;                // symbols per encoder thread
constexpr int kTile = kThreads * kItems;  // symbols per encoder tile
constexpr int kRootBits = 12;             // first-level decode table: 4096 entries
constexpr uint32_t kNoError = 0xFFFFFFFFu;

// ---- decoupled look-back (single-kernel soft synchronization) --------------------------------
// Tile status: flag in the top two bits (0 not ready, 1 aggregate, 2 inclusive prefix), the
// value in the low 62 bits. Called by one thread per block; returns the exclusive prefix.
constexpr unsigned long long kFlagAggregate = 1ull << 62, kFlagPrefix = 2ull << 62, kValueMask = (1ull << 62) - 1;

__device__ unsigned long long look_back(unsigned long long* status, unsigned tile, unsigned long long aggregate) {
  if (tile == 0) {
    atomicExch(&status[0], kFlagPrefix | aggregate);
    return 0;
  }
  atomicExch(&status[tile], kFlagAggregate | aggregate);
  unsigned long long exclusive = 0;
  long long p = static_cast<long long>(tile) - 1;
  while (p >= 0) {
    const unsigned long long s = atomicAdd(&status[p], 0ull);  // coherent read
    const unsigned long long flag = s & ~kValueMask;
    if (flag == 0) continue;  // the predecessor has not published yet: it runs, since it started earlier
    exclusive += s & kValueMask;
    if (flag == kFlagPrefix) break;
    --p;
  }
  atomicExch(&status[tile], kFlagPrefix | (exclusive + aggregate));
  return exclusive;
}

// ---- histogram ----------------------------------------------------------------------------
// One block per 16 KiB unit (the block splitter's input, block_split.h): shared-memory counts,
// 32-bit wordwise loads, written to counts[unit * 256 + symbol] (`in` starts at a unit).
__global__ void unit_histogram_kernel(const uint8_t* __restrict__ in, size_t n, unsigned int* __restrict__ counts) {
  __shared__ unsigned int h[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) h[i] = 0;
  __syncthreads();
  const size_t begin = static_cast<size_t>(blockIdx.x) * kBlockUnit;
  const size_t len = min(n - begin, static_cast<size_t>(kBlockUnit));
  const uint32_t* w = reinterpret_cast<const uint32_t*>(in + begin);
  for (size_t i = threadIdx.x; i < len / 4; i += blockDim.x) {
    const uint32_t v = w[i];
    atomicAdd(&h[v & 0xFF], 1u);
    atomicAdd(&h[(v >> 8) & 0xFF], 1u);
    atomicAdd(&h[(v >> 16) & 0xFF], 1u);
    atomicAdd(&h[v >> 24], 1u);
  }
  for (size_t i = len / 4 * 4 + threadIdx.x; i < len; i += blockDim.x) atomicAdd(&h[in[begin + i]], 1u);
  __syncthreads();
  for (int i = threadIdx.x; i < 256; i += blockDim.x) counts[static_cast<size_t>(blockIdx.x) * 256 + i] = h[i];
}

// ---- encode ----------------------------------------------------------------------------------
// enc_table: 256 entries per code block; unit_block: the code block of each 16 KiB unit (a tile
// lies inside one unit, so one table serves the whole tile).
__global__ void encode_kernel(const uint8_t* __restrict__ in, size_t n, const uint32_t* __restrict__ enc_table,
                              const uint32_t* __restrict__ unit_block, uint32_t* __restrict__ words, uint32_t* __restrict__ gaps,
                              unsigned long long* status, unsigned int* tile_counter, uint32_t segment_log2,
                              unsigned long long total_bits) {
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ uint32_t enc[256];
  __shared__ unsigned int tile_s;
  __shared__ unsigned long long prefix_s;
  if (threadIdx.x == 0) tile_s = atomicAdd(tile_counter, 1u);
  __syncthreads();
  const unsigned tile = tile_s;
  const uint32_t* tile_table = enc_table + 256u * unit_block[static_cast<size_t>(tile) * kTile / kBlockUnit];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) enc[i] = tile_table[i];
  __syncthreads();
  const size_t base = static_cast<size_t>(tile) * kTile + static_cast<size_t>(threadIdx.x) * kItems;
  uint32_t bits = 0;
  for (int k = 0; k < kItems; ++k)
    if (base + k < n) bits += enc[in[base + k]] >> 24;
  uint32_t exclusive = 0, aggregate = 0;
  Scan(scan_storage).ExclusiveSum(bits, exclusive, aggregate);
  if (threadIdx.x == 0) prefix_s = look_back(status, tile, aggregate);
  __syncthreads();
  if (base >= n) return;
  uint64_t pos = prefix_s + exclusive;
  // Start of the codeword before this thread's first one (none for the very first).
  // (The previous symbol may lie in the previous code block: its table from global memory.)
  uint64_t prev = base == 0 ? UINT64_MAX : pos - (enc_table[256u * unit_block[(base - 1) / kBlockUnit] + in[base - 1]] >> 24);
  uint64_t wi = pos >> 5;
  uint32_t nacc = static_cast<uint32_t>(pos & 31);
  bool shared_first = nacc != 0;  // the first word is shared with the previous thread
  uint64_t acc = 0;
  const size_t end = min(n, base + kItems);
  for (size_t i = base; i < end; ++i) {
    const uint32_t e = enc[in[i]];
    const uint32_t len = e >> 24;
    if (gaps) {
      // Segment k's entry belongs to the first codeword start at or after k*S.
      const uint64_t k = pos >> segment_log2;
      if (prev == UINT64_MAX ? true : (k << segment_log2) > prev)
        if ((k << segment_log2) <= pos)
          atomicOr(&gaps[k >> 3], static_cast<uint32_t>(pos - (k << segment_log2)) << ((k & 7) * 4));
    }
    prev = pos;
    pos += len;
    acc = (acc << len) | (e & 0xFFFFFF);
    nacc += len;
    if (nacc >= 32) {
      nacc -= 32;
      const uint32_t w = static_cast<uint32_t>(acc >> nacc);
      if (shared_first)
        atomicOr(&words[wi], w);
      else
        words[wi] = w;
      shared_first = false;
      ++wi;
    }
  }
  if (nacc > 0) atomicOr(&words[wi], static_cast<uint32_t>(acc << (32 - nacc)));  // shared with the next thread
  if (gaps && end == n) {
    // The end of the stream is a boundary too, for a last segment without a codeword start.
    const uint64_t k = (prev >> segment_log2) + 1;
    if ((k << segment_log2) < total_bits)
      atomicOr(&gaps[k >> 3], static_cast<uint32_t>(total_bits - (k << segment_log2)) << ((k & 7) * 4));
  }
}

// ---- decode ----------------------------------------------------------------------------------
// The code blocks' tables: per block a 4096-entry first-level table (one of them, the block where
// a thread block's first segment starts, is copied to shared memory) and its second-level
// entries (global memory; only for codes over 12 bits), and the blocks' first bits.
struct DeviceTables {
  const uint32_t* root;                  // blocks * 4096 entries
  const uint32_t* sub;                   // all second-level entries
  const uint32_t* sub_offset;            // per block: its first entry in `sub`
  const unsigned long long* block_bits;  // blocks + 1: first bit of each block, then the total
  uint32_t blocks;
};

__device__ __forceinline__ uint32_t decode_entry(const uint32_t* root, const uint32_t* sub, const uint32_t* words,
                                                 uint64_t nwords, uint64_t pos) {
  const uint32_t v = peek32(words, nwords, pos);
  uint32_t e = root[v >> (32 - kRootBits)];
  if ((e >> 30) == 0) e = sub[(e >> 5) + ((v << kRootBits) >> (32 - (e & 31)))];
  return e;
}

// The code block holding bit `pos`: the last block starting at or before it.
__device__ __forceinline__ uint32_t block_of(const DeviceTables& t, uint64_t pos) {
  uint32_t lo = 0, hi = t.blocks - 1;
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (t.block_bits[mid] <= pos)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// A thread's position in the blocks: the tables of the block it decodes, switched when its
// position reaches the next block's first bit (block boundaries are codeword boundaries).
struct BlockCursor {
  uint32_t b;
  uint64_t end;
  const uint32_t* root;
  const uint32_t* sub;
  __device__ void set(const DeviceTables& t, const uint32_t* shared_root, uint32_t shared_block, uint32_t block) {
    b = block;
    end = t.block_bits[b + 1];
    root = b == shared_block ? shared_root : t.root + static_cast<size_t>(b) * (1u << kRootBits);
    sub = t.sub + t.sub_offset[b];
  }
  __device__ uint32_t decode(const DeviceTables& t, const uint32_t* shared_root, uint32_t shared_block, const uint32_t* words,
                             uint64_t nwords, uint64_t pos) {
    while (pos >= end && b + 1 < t.blocks) set(t, shared_root, shared_block, b + 1);
    return decode_entry(root, sub, words, nwords, pos);
  }
};

// Start of segment k: from the gap array, or from the self-synchronized starts.
__device__ __forceinline__ uint64_t segment_start(uint64_t k, uint64_t nseg, uint64_t total_bits, uint32_t segment_log2,
                                                  const uint8_t* gaps, const unsigned long long* starts) {
  if (k >= nseg) return total_bits;
  if (starts) return starts[k];
  return (k << segment_log2) + read_gap(gaps, k);
}

__global__ void decode_kernel(const uint32_t* __restrict__ words, uint64_t nwords, DeviceTables table, const uint8_t* gaps,
                              const unsigned long long* starts, uint64_t nseg, uint32_t segment_log2,
                              unsigned long long total_bits, uint8_t* __restrict__ out, unsigned long long out_len,
                              unsigned long long* status, unsigned int* tile_counter, unsigned int* error_segment) {
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ uint32_t root[1 << kRootBits];
  __shared__ unsigned int tile_s;
  __shared__ unsigned long long prefix_s;
  __shared__ uint32_t shared_block_s;
  if (threadIdx.x == 0) {
    tile_s = atomicAdd(tile_counter, 1u);
    const uint64_t k0 = static_cast<uint64_t>(tile_s) * kThreads;
    shared_block_s = block_of(
        table, min(segment_start(k0, nseg, total_bits, segment_log2, gaps, starts), static_cast<uint64_t>(total_bits) - 1));
  }
  __syncthreads();
  const uint32_t shared_block = shared_block_s;
  for (int i = threadIdx.x; i < (1 << kRootBits); i += blockDim.x)
    root[i] = table.root[static_cast<size_t>(shared_block) * (1u << kRootBits) + i];
  __syncthreads();
  const uint64_t k = static_cast<uint64_t>(tile_s) * kThreads + threadIdx.x;
  uint64_t begin = 0, end = 0;
  uint32_t count = 0;
  bool ok = true;
  if (k < nseg) {
    begin = segment_start(k, nseg, total_bits, segment_log2, gaps, starts);
    end = segment_start(k + 1, nseg, total_bits, segment_log2, gaps, starts);
    if (begin > end || end > total_bits) ok = false;
    uint64_t pos = begin;
    BlockCursor cur;
    if (ok && pos < end) cur.set(table, root, shared_block, block_of(table, pos));
    while (ok && pos < end) {
      pos += (cur.decode(table, root, shared_block, words, nwords, pos) >> 24) & 31;
      ++count;
    }
    if (!ok || pos != end) {
      ok = false;
      count = 0;
      atomicMin(error_segment, static_cast<unsigned int>(min(k, uint64_t{0xFFFFFFFE})));
    }
  }
  uint32_t exclusive = 0, aggregate = 0;
  Scan(scan_storage).ExclusiveSum(count, exclusive, aggregate);
  if (threadIdx.x == 0) prefix_s = look_back(status, tile_s, aggregate);
  __syncthreads();
  if (k >= nseg || !ok) return;
  uint64_t o = prefix_s + exclusive;
  if (o + count > out_len) {
    atomicMin(error_segment, static_cast<unsigned int>(min(k, uint64_t{0xFFFFFFFE})));
    return;
  }
  // Second pass: write the symbols, four at a time where the output is word-aligned.
  uint64_t pos = begin;
  uint32_t pack = 0;
  int packed = 0;
  BlockCursor cur;
  if (count > 0) cur.set(table, root, shared_block, block_of(table, pos));
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t e = cur.decode(table, root, shared_block, words, nwords, pos);
    pos += (e >> 24) & 31;
    const uint8_t sym = static_cast<uint8_t>(e);
    if (packed == 0 && (o & 3) != 0) {
      out[o++] = sym;  // unaligned head
      continue;
    }
    pack |= static_cast<uint32_t>(sym) << (8 * packed);
    if (++packed == 4) {
      *reinterpret_cast<uint32_t*>(out + o) = pack;
      o += 4;
      pack = 0;
      packed = 0;
    }
  }
  for (int b = 0; b < packed; ++b) out[o++] = static_cast<uint8_t>(pack >> (8 * b));
}

// Self-synchronization round: thread k decodes from starts_in[k] up to the first codeword
// boundary at or after (k+1)*S and proposes it as the start of segment k+1.
__global__ void sync_kernel(const uint32_t* __restrict__ words, uint64_t nwords, DeviceTables table,
                            const unsigned long long* __restrict__ starts_in, unsigned long long* __restrict__ starts_out,
                            uint64_t nseg, uint32_t segment_log2, unsigned long long total_bits, unsigned int* changed) {
  __shared__ uint32_t root[1 << kRootBits];
  __shared__ uint32_t shared_block_s;
  const uint64_t k0 = static_cast<uint64_t>(blockIdx.x) * blockDim.x;
  if (threadIdx.x == 0)
    shared_block_s =
        block_of(table, min(static_cast<uint64_t>(starts_in[min(k0, nseg - 1)]), static_cast<uint64_t>(total_bits) - 1));
  __syncthreads();
  const uint32_t shared_block = shared_block_s;
  for (int i = threadIdx.x; i < (1 << kRootBits); i += blockDim.x)
    root[i] = table.root[static_cast<size_t>(shared_block) * (1u << kRootBits) + i];
  __syncthreads();
  const uint64_t k = k0 + threadIdx.x;
  if (k == 0) starts_out[0] = 0;
  if (k + 1 >= nseg) return;
  const uint64_t limit = min((k + 1) << segment_log2, static_cast<uint64_t>(total_bits));
  uint64_t pos = starts_in[k];
  BlockCursor cur;
  if (pos < limit) cur.set(table, root, shared_block, block_of(table, pos));
  while (pos < limit) pos += (cur.decode(table, root, shared_block, words, nwords, pos) >> 24) & 31;
  starts_out[k + 1] = pos;
  if (pos != starts_in[k + 1]) atomicOr(changed, 1u);
}

__global__ void init_starts_kernel(unsigned long long* starts, uint64_t nseg, uint32_t segment_log2) {
  const uint64_t k = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k < nseg) starts[k] = k << segment_log2;
}

unsigned int blocks_for(uint64_t items, uint64_t per_block) {
  return static_cast<unsigned int>((items + per_block - 1) / per_block);
}

// A buffer that grows, in device memory (cudaMalloc) or pinned host memory (cudaMallocHost).
template <class T, bool kPinned>
struct GrowingBuffer {
  T* ptr = nullptr;
  size_t count = 0;
  void reserve(size_t n) {
    if (n <= count) return;
    release();
    void* p = nullptr;
    const size_t bytes = std::max<size_t>(n, 1) * sizeof(T);
    if constexpr (kPinned)
      HPCNN_CUDA_CHECK(cudaMallocHost(&p, bytes));
    else
      HPCNN_CUDA_CHECK(cudaMalloc(&p, bytes));
    ptr = static_cast<T*>(p);
    count = n;
  }
  void release() {
    if (ptr) {
      if constexpr (kPinned)
        cudaFreeHost(ptr);
      else
        cudaFree(ptr);
    }
    ptr = nullptr;
    count = 0;
  }
  ~GrowingBuffer() { release(); }
};
template <class T>
using DeviceBuffer = GrowingBuffer<T, false>;
using PinnedBuffer = GrowingBuffer<uint8_t, true>;

}  // namespace

bool available(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (why)
      *why =
          err != cudaSuccess ? std::string("no usable CUDA device (") + cudaGetErrorString(err) + ")" : "no CUDA device present";
    return false;
  }
  return true;
}

struct Codec::Impl {
  size_t memory_cap = 0;
  cudaStream_t stream[2] = {nullptr, nullptr};
  cudaEvent_t start = nullptr, stop = nullptr;
  DeviceBuffer<uint8_t> in, out;
  DeviceBuffer<uint32_t> words, gaps, table;
  DeviceBuffer<unsigned int> counts, counter, error;
  DeviceBuffer<unsigned long long> status, starts_a, starts_b, block_bits;
  PinnedBuffer pinned_in, pinned_out;
  struct Events {
    std::vector<cudaEvent_t> ev;
    void reserve(size_t n) {
      while (ev.size() < n) {
        cudaEvent_t e;
        HPCNN_CUDA_CHECK(cudaEventCreate(&e));
        ev.push_back(e);
      }
    }
    cudaEvent_t at(size_t i) const { return ev.at(i); }
    ~Events() {
      for (auto e : ev) cudaEventDestroy(e);
    }
  } piece_events;

  void check_cap(size_t bytes) const {
    if (memory_cap && bytes > memory_cap)
      throw_error(ErrorKind::usage, "a chunk needs " + std::to_string(bytes) + " bytes of GPU memory, over the cap of " +
                                        std::to_string(memory_cap) + "; use a smaller --chunk-size");
  }
};

Codec::Codec(size_t memory_cap) : impl_(std::make_unique<Impl>()) {
  std::string why;
  if (!available(&why)) throw_error(ErrorKind::device, "--device cuda: " + why);
  impl_->memory_cap = memory_cap;
  for (auto& s : impl_->stream) HPCNN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  HPCNN_CUDA_CHECK(cudaEventCreate(&impl_->start));
  HPCNN_CUDA_CHECK(cudaEventCreate(&impl_->stop));
}

Codec::~Codec() {
  for (auto& s : impl_->stream)
    if (s) cudaStreamDestroy(s);
  if (impl_->start) cudaEventDestroy(impl_->start);
  if (impl_->stop) cudaEventDestroy(impl_->stop);
}

void Codec::encode_chunk(const uint8_t* in, size_t n, const FileHeader& fh, std::vector<uint8_t>& out) {
  Impl& m = *impl_;
  if (n == 0 || n > fh.chunk_size) throw_error(ErrorKind::usage, "encode_chunk: chunk size out of range");
  const size_t max_words = (n * kMaxCodeLength + 31) / 32;
  const size_t max_gap_words = (segment_count(uint64_t{n} * kMaxCodeLength, fh.segment_bits()) + 7) / 8 + 1;
  const size_t tiles = (n + kTile - 1) / kTile;
  const size_t units = block_units(n);
  m.check_cap(n + 4 * max_words + 4 * max_gap_words + 8 * tiles + 4 * 256 * units + 4 * (256 * units + units));
  m.in.reserve(n);
  m.words.reserve(max_words);
  m.gaps.reserve(max_gap_words);
  m.status.reserve(tiles);
  m.counts.reserve(256 * units);
  m.counter.reserve(1);
  m.table.reserve(256 * units + units);  // at most one code block per unit, and the unit -> block map
  m.pinned_in.reserve(n);
  std::memcpy(m.pinned_in.ptr, in, n);

  // Upload in pieces on two streams, each piece's units histogrammed as soon as it has arrived.
  cudaStream_t s0 = m.stream[0];
  constexpr size_t kPiece = 8u << 20;  // a multiple of the unit
  const size_t pieces = (n + kPiece - 1) / kPiece;
  m.piece_events.reserve(2 * pieces);
  for (size_t off = 0, i = 0; off < n; off += kPiece, ++i) {
    const size_t len = std::min(kPiece, n - off);
    cudaStream_t s = m.stream[i % 2];
    HPCNN_CUDA_CHECK(cudaMemcpyAsync(m.in.ptr + off, m.pinned_in.ptr + off, len, cudaMemcpyHostToDevice, s));
    HPCNN_CUDA_CHECK(cudaEventRecord(m.piece_events.at(2 * i), s));
    unit_histogram_kernel<<<static_cast<unsigned>(block_units(len)), kThreads, 0, s>>>(m.in.ptr + off, len,
                                                                                       m.counts.ptr + off / kBlockUnit * 256);
    HPCNN_CUDA_CHECK(cudaGetLastError());
    HPCNN_CUDA_CHECK(cudaEventRecord(m.piece_events.at(2 * i + 1), s));
  }
  std::vector<unsigned int> counts32(256 * units);
  HPCNN_CUDA_CHECK(cudaStreamSynchronize(m.stream[1]));
  HPCNN_CUDA_CHECK(cudaStreamSynchronize(s0));
  HPCNN_CUDA_CHECK(
      cudaMemcpyAsync(counts32.data(), m.counts.ptr, counts32.size() * sizeof(unsigned int), cudaMemcpyDeviceToHost, s0));
  HPCNN_CUDA_CHECK(cudaStreamSynchronize(s0));
  double kernel_ms = 0;
  for (size_t i = 0; i < pieces; ++i) {
    float ms = 0;
    HPCNN_CUDA_CHECK(cudaEventElapsedTime(&ms, m.piece_events.at(2 * i), m.piece_events.at(2 * i + 1)));
    kernel_ms += ms;
  }
  times_.kernel_ms = kernel_ms;
  std::vector<Histogram> unit_hist(units);
  for (size_t u = 0; u < units; ++u)
    for (int s = 0; s < 256; ++s) unit_hist[u][s] = counts32[u * 256 + s];
  const uint64_t checksum = checksum64(in, n);
  const ChunkPlan plan = plan_chunk(unit_hist, n, fh);  // the same host decisions as the CPU encoder
  if (plan.mode == ChunkMode::single_symbol) return write_single_symbol_chunk(plan, n, checksum, out);
  if (plan.mode == ChunkMode::raw) return write_raw_chunk(in, n, checksum, out);

  const PayloadLayout& lay = plan.layout;
  const uint64_t nseg = segment_count(plan.total_bits, fh.segment_bits());
  const size_t gap_words = fh.gap_array() ? (nseg + 7) / 8 : 0;
  // The blocks' codeword tables, then the code block of every unit.
  const size_t nblocks = plan.blocks.size();
  m.pinned_in.reserve(4 * (256 * nblocks + units));
  uint32_t* tables = reinterpret_cast<uint32_t*>(m.pinned_in.ptr);
  for (size_t b = 0; b < nblocks; ++b) {
    std::memcpy(tables + 256 * b, plan.blocks[b].enc.data(), 256 * sizeof(uint32_t));
    for (size_t u = plan.blocks[b].first_unit; u < plan.blocks[b].end_unit; ++u)
      tables[256 * nblocks + u] = static_cast<uint32_t>(b);
  }
  HPCNN_CUDA_CHECK(cudaMemcpyAsync(m.table.ptr, tables, 4 * (256 * nblocks + units), cudaMemcpyHostToDevice, s0));
  HPCNN_CUDA_CHECK(cudaMemsetAsync(m.words.ptr, 0, lay.words_count * sizeof(uint32_t), s0));
  if (gap_words) HPCNN_CUDA_CHECK(cudaMemsetAsync(m.gaps.ptr, 0, gap_words * sizeof(uint32_t), s0));
  HPCNN_CUDA_CHECK(cudaMemsetAsync(m.status.ptr, 0, tiles * sizeof(unsigned long long), s0));
  HPCNN_CUDA_CHECK(cudaMemsetAsync(m.counter.ptr, 0, sizeof(unsigned int), s0));
  HPCNN_CUDA_CHECK(cudaEventRecord(m.start, s0));
  encode_kernel<<<static_cast<unsigned>(tiles), kThreads, 0, s0>>>(m.in.ptr, n, m.table.ptr, m.table.ptr + 256 * nblocks,
                                                                   m.words.ptr, gap_words ? m.gaps.ptr : nullptr, m.status.ptr,
                                                                   m.counter.ptr, fh.segment_log2, plan.total_bits);
  HPCNN_CUDA_CHECK(cudaGetLastError());
  HPCNN_CUDA_CHECK(cudaEventRecord(m.stop, s0));
  begin_huffman_chunk(plan, out);
  const size_t out_bytes = lay.words_count * 4 + gap_words * 4;
  m.pinned_out.reserve(out_bytes);
  HPCNN_CUDA_CHECK(cudaMemcpyAsync(m.pinned_out.ptr, m.words.ptr, lay.words_count * 4, cudaMemcpyDeviceToHost, s0));
  if (gap_words)
    HPCNN_CUDA_CHECK(
        cudaMemcpyAsync(m.pinned_out.ptr + lay.words_count * 4, m.gaps.ptr, gap_words * 4, cudaMemcpyDeviceToHost, s0));
  HPCNN_CUDA_CHECK(cudaStreamSynchronize(s0));
  float ms = 0;
  HPCNN_CUDA_CHECK(cudaEventElapsedTime(&ms, m.start, m.stop));
  times_.kernel_ms = kernel_ms + ms;
  std::memcpy(out.data() + lay.words_offset, m.pinned_out.ptr, lay.words_count * 4);
  if (fh.gap_array()) std::memcpy(out.data() + lay.gap_offset, m.pinned_out.ptr + lay.words_count * 4, lay.gap_size);
  finish_huffman_chunk(plan, n, checksum, out);
}

void Codec::decode_chunk(const ChunkHeader& h, const uint8_t* chunk, const FileHeader& fh, uint8_t* out, uint64_t index,
                         uint64_t offset) {
  Impl& m = *impl_;
  const std::string where = chunk_where(index, offset);
  const uint8_t* payload = chunk + kChunkHeaderSize;
  if (h.mode == ChunkMode::raw) {
    std::memcpy(out, payload, h.original_length);
  } else if (h.mode == ChunkMode::single_symbol) {
    std::memset(out, payload[0], h.original_length);
  } else if (h.mode == ChunkMode::huffman) {
    size_t table_size = 0;
    const std::vector<CodeBlock> blocks = read_code_blocks(h, payload, h.payload_length, fh, &table_size, index, offset);
    const PayloadLayout lay = huffman_layout(table_size, h.bit_length, fh);
    if (lay.payload_length != h.payload_length)
      throw_error(ErrorKind::bad_input, "payload length does not match its bit length and tables " + where);
    if (checksum32(chunk + kChunkHeaderSize, lay.words_offset - kChunkHeaderSize) != h.meta_checksum)
      throw_error(ErrorKind::bad_input, "code table or gap array checksum mismatch " + where);
    check_bitstream_padding(chunk + lay.words_offset, lay.words_count, h.bit_length, where);
    // Per code block: its first-level table (4096 entries), its second-level entries, and where
    // they start; the tables uploaded as [roots | subs | sub offsets].
    const size_t nblocks = blocks.size();
    std::vector<uint32_t> subs, sub_offset(nblocks);
    std::vector<unsigned long long> block_bits(nblocks + 1);
    const size_t root_words = nblocks << kRootBits;
    std::vector<uint32_t> roots(root_words);
    for (size_t b = 0; b < nblocks; ++b) {
      const DecodeTable t = build_decode_table(blocks[b].lengths, kRootBits, /*multi=*/false);
      std::memcpy(roots.data() + (b << kRootBits), t.root.data(), t.root.size() * 4);
      sub_offset[b] = static_cast<uint32_t>(subs.size());
      subs.insert(subs.end(), t.sub.begin(), t.sub.end());
      block_bits[b] = blocks[b].bit_begin;
    }
    block_bits[nblocks] = h.bit_length;
    if (subs.empty()) subs.push_back(0);
    const size_t table_words = root_words + subs.size() + nblocks;
    const uint64_t nseg = segment_count(h.bit_length, fh.segment_bits());
    m.check_cap(lay.words_count * 4 + lay.gap_size + h.original_length + 16 * nseg + 4 * table_words + 8 * (nblocks + 1));
    m.words.reserve(lay.words_count + 1);
    m.gaps.reserve(lay.gap_size / 4 + 2);
    m.table.reserve(table_words);
    m.block_bits.reserve(nblocks + 1);
    m.out.reserve(h.original_length + 4);
    m.status.reserve(nseg / kThreads + 1);
    m.counter.reserve(1);
    m.error.reserve(1);
    m.pinned_in.reserve(lay.words_count * 4 + lay.gap_size + 4 * table_words + 8 * (nblocks + 1) + 8);
    cudaStream_t s0 = m.stream[0];
    uint8_t* staging = m.pinned_in.ptr;
    std::memcpy(staging, chunk + lay.words_offset, lay.words_count * 4);
    std::memcpy(staging + lay.words_count * 4, chunk + lay.gap_offset, lay.gap_size);
    uint8_t* table_staging = staging + lay.words_count * 4 + lay.gap_size;
    std::memcpy(table_staging, roots.data(), root_words * 4);
    std::memcpy(table_staging + root_words * 4, subs.data(), subs.size() * 4);
    std::memcpy(table_staging + (root_words + subs.size()) * 4, sub_offset.data(), nblocks * 4);
    uint8_t* bits_staging = staging + ((lay.words_count * 4 + lay.gap_size + 4 * table_words + 7) & ~size_t{7});
    std::memcpy(bits_staging, block_bits.data(), 8 * (nblocks + 1));
    HPCNN_CUDA_CHECK(cudaMemcpyAsync(m.words.ptr, staging, lay.words_count * 4, cudaMemcpyHostToDevice, s0));
    if (lay.gap_size)
      HPCNN_CUDA_CHECK(cudaMemcpyAsync(m.gaps.ptr, staging + lay.words_count * 4, lay.gap_size, cudaMemcpyHostToDevice, s0));
    HPCNN_CUDA_CHECK(cudaMemcpyAsync(m.table.ptr, table_staging, table_words * 4, cudaMemcpyHostToDevice, s0));
    HPCNN_CUDA_CHECK(cudaMemcpyAsync(m.block_bits.ptr, bits_staging, 8 * (nblocks + 1), cudaMemcpyHostToDevice, s0));
    const DeviceTables dt{m.table.ptr, m.table.ptr + root_words, m.table.ptr + root_words + subs.size(), m.block_bits.ptr,
                          static_cast<uint32_t>(nblocks)};
    HPCNN_CUDA_CHECK(cudaEventRecord(m.start, s0));  // kernels only: after the uploads
    const unsigned long long* starts = nullptr;
    if (!fh.gap_array()) {
      // Self-synchronization rounds until no segment start changes.
      m.starts_a.reserve(nseg);
      m.starts_b.reserve(nseg);
      init_starts_kernel<<<blocks_for(nseg, kThreads), kThreads, 0, s0>>>(m.starts_a.ptr, nseg, fh.segment_log2);
      HPCNN_CUDA_CHECK(cudaGetLastError());
      unsigned long long* cur = m.starts_a.ptr;
      unsigned long long* next = m.starts_b.ptr;
      for (uint64_t round = 0;; ++round) {
        if (round > nseg + 1) throw_error(ErrorKind::bad_input, "self-synchronization does not converge " + where);
        HPCNN_CUDA_CHECK(cudaMemsetAsync(m.error.ptr, 0, sizeof(unsigned int), s0));
        sync_kernel<<<blocks_for(nseg, kThreads), kThreads, 0, s0>>>(m.words.ptr, lay.words_count, dt, cur, next, nseg,
                                                                     fh.segment_log2, h.bit_length, m.error.ptr);
        HPCNN_CUDA_CHECK(cudaGetLastError());
        unsigned int changed = 0;
        HPCNN_CUDA_CHECK(cudaMemcpyAsync(&changed, m.error.ptr, sizeof changed, cudaMemcpyDeviceToHost, s0));
        HPCNN_CUDA_CHECK(cudaStreamSynchronize(s0));
        std::swap(cur, next);
        if (!changed) break;
      }
      starts = cur;
    }
    const unsigned int no_error = kNoError;
    HPCNN_CUDA_CHECK(cudaMemcpyAsync(m.error.ptr, &no_error, sizeof no_error, cudaMemcpyHostToDevice, s0));
    const size_t tiles = nseg / kThreads + 1;
    HPCNN_CUDA_CHECK(cudaMemsetAsync(m.status.ptr, 0, tiles * sizeof(unsigned long long), s0));
    HPCNN_CUDA_CHECK(cudaMemsetAsync(m.counter.ptr, 0, sizeof(unsigned int), s0));
    decode_kernel<<<static_cast<unsigned>(tiles), kThreads, 0, s0>>>(
        m.words.ptr, lay.words_count, dt, reinterpret_cast<const uint8_t*>(m.gaps.ptr), starts, nseg, fh.segment_log2,
        h.bit_length, m.out.ptr, h.original_length, m.status.ptr, m.counter.ptr, m.error.ptr);
    HPCNN_CUDA_CHECK(cudaGetLastError());
    HPCNN_CUDA_CHECK(cudaEventRecord(m.stop, s0));
    m.pinned_out.reserve(h.original_length);
    unsigned int error_segment = kNoError;
    unsigned long long last_status = 0;
    HPCNN_CUDA_CHECK(cudaMemcpyAsync(&error_segment, m.error.ptr, sizeof error_segment, cudaMemcpyDeviceToHost, s0));
    HPCNN_CUDA_CHECK(cudaMemcpyAsync(&last_status, m.status.ptr + (tiles - 1), sizeof last_status, cudaMemcpyDeviceToHost, s0));
    HPCNN_CUDA_CHECK(cudaMemcpyAsync(m.pinned_out.ptr, m.out.ptr, h.original_length, cudaMemcpyDeviceToHost, s0));
    HPCNN_CUDA_CHECK(cudaStreamSynchronize(s0));
    float ms = 0;
    HPCNN_CUDA_CHECK(cudaEventElapsedTime(&ms, m.start, m.stop));
    times_.kernel_ms = ms;
    if (error_segment != kNoError)
      throw_error(ErrorKind::bad_input,
                  "corrupt bitstream or gap array at segment " + std::to_string(error_segment) + " " + where);
    if ((last_status & kValueMask) != h.original_length)
      throw_error(ErrorKind::bad_input, "decoded " + std::to_string(last_status & kValueMask) +
                                            " symbols, the chunk header says " + std::to_string(h.original_length) + " " + where);
    std::memcpy(out, m.pinned_out.ptr, h.original_length);
  } else {
    throw_error(ErrorKind::bad_input, "cannot decode chunk mode " + std::to_string(static_cast<int>(h.mode)) + " " + where);
  }
  if (checksum64(out, h.original_length) != h.checksum)
    throw_error(ErrorKind::bad_input, "checksum mismatch: the decoded chunk differs from the original " + where);
}

}  // namespace hpcnn::huffman::cuda
