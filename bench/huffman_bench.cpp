// Benchmark of the huffgpu CPU codec against zlib's Huffman-only mode (deflate with
// Z_HUFFMAN_ONLY) and huff0 (zstd's Huffman coder, bench/huff0_peer.h) on the same files, in
// memory, in the same run, with the order-0 entropy bound.
// usage: huffman_bench [--threads N] [--repeat R] [--burst-ms MS] [--reference TSV] [--gpu] FILE...
// Prints per-file and total compressed sizes and encode/decode MB/s (ours at 1 thread and at
// N threads, zlib and huff0 at 1 thread), then checks the goals: sizes against zlib, one-thread
// speed against huff0, and (--reference: lines "file<TAB>bytes S=256<TAB>bytes without gap
// arrays" of an earlier encoder) each file's size against that reference.
#if defined(HPCNN_HAVE_ZLIB)
#include <zlib.h>
#endif
#if defined(HPCNN_HAVE_HUFF0)
#include "huff0_peer.h"
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/threads.h"
#include "huffman/cpu/decoder.h"
#include "huffman/cpu/encoder.h"
#include "huffman/cuda/codec.h"
#include "huffman/format.h"

using namespace hpcnn::huffman;
using Clock = std::chrono::steady_clock;

namespace {

struct Encoded {
  std::vector<std::vector<uint8_t>> chunks;
  size_t bytes = 0;  // whole stream: header, chunks, end marker, table, trailer
};

// Buffers are reused across calls, as the tools reuse them across chunks (zlib's are too).
void encode_all(const std::vector<uint8_t>& in, const FileHeader& fh, int threads, Encoded& e) {
  e.bytes = kFileHeaderSize + kChunkHeaderSize + kTrailerSize;
  const size_t nchunks = (in.size() + fh.chunk_size - 1) / fh.chunk_size;
  e.chunks.resize(nchunks);
  for (size_t i = 0; i < nchunks; ++i) {
    const size_t off = i * fh.chunk_size;
    const size_t n = std::min<size_t>(fh.chunk_size, in.size() - off);
    encode_chunk(in.data() + off, n, fh, threads, e.chunks[i]);
    e.bytes += e.chunks[i].size() + kTableEntrySize;
  }
}

void decode_all(const Encoded& e, const FileHeader& fh, int threads, std::vector<uint8_t>& out, DecoderScratch& scratch) {
  size_t off = 0;
  for (size_t i = 0; i < e.chunks.size(); ++i) {
    const ChunkHeader h = read_chunk_header(e.chunks[i].data(), fh, i, 0);
    decode_chunk(h, e.chunks[i].data(), fh, threads, out.data() + off, scratch, i, 0);
    off += h.original_length;
  }
}

#if defined(HPCNN_HAVE_ZLIB)
size_t zlib_huffman(const std::vector<uint8_t>& in, std::vector<uint8_t>& out) {
  z_stream z{};
  deflateInit2(&z, 1, Z_DEFLATED, -15, 8, Z_HUFFMAN_ONLY);  // zlib defaults but the strategy
  out.resize(deflateBound(&z, in.size()) + 1024);
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  const size_t n = z.total_out;
  deflateEnd(&z);
  return n;
}

void zlib_inflate(const std::vector<uint8_t>& in, size_t n, std::vector<uint8_t>& out) {
  z_stream z{};
  inflateInit2(&z, -15);
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(n);
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (inflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  inflateEnd(&z);
}

#else
// Built without zlib: its columns read 0.
size_t zlib_huffman(const std::vector<uint8_t>&, std::vector<uint8_t>&) { return 0; }
void zlib_inflate(const std::vector<uint8_t>&, size_t, std::vector<uint8_t>&) {}
#endif

double entropy_bytes(const std::vector<uint8_t>& in) {
  uint64_t c[256] = {};
  byte_histogram(in.data(), in.size(), c);
  double bits = 0;
  for (uint64_t k : c)
    if (k) bits -= static_cast<double>(k) * std::log2(static_cast<double>(k) / static_cast<double>(in.size()));
  return bits / 8;
}

struct Row {
  std::string name;
  size_t size = 0;
  double entropy = 0;
  size_t ours = 0, ours128 = 0, ours_nogap = 0, zlib = 0, huff0 = 0;
  double enc1 = 0, dec1 = 0, encN = 0, decN = 0, zenc = 0, zdec = 0, henc = 0, hdec = 0;  // seconds
};

// --gpu: the CUDA codec on the concatenation of the files (repeated to at least 1 GiB when the
// files are smaller), kernels only and end to end (host buffers in and out), with and without
// gap arrays, beside the CPU codec on all cores in the same run.
void gpu_section(const std::vector<std::string>& files, int repeat) {
  std::string why;
  if (!cuda::available(&why)) {
    std::printf("\nGPU: skipped (%s)\n", why.c_str());
    return;
  }
  std::vector<uint8_t> one, in;
  for (const auto& f : files) {
    std::ifstream s(f, std::ios::binary);
    one.insert(one.end(), std::istreambuf_iterator<char>(s), std::istreambuf_iterator<char>());
  }
  if (one.empty()) return;
  while (in.size() < (size_t{1} << 30)) in.insert(in.end(), one.begin(), one.end());
  const double gb = static_cast<double>(in.size()) / 1e9;
  cuda::Codec codec;
  std::printf("\nGPU: %.2f GB input (the files repeated), chunks of 64 MiB, best of %d\n", gb, repeat);
  std::printf("%-28s %12s %12s %12s\n", "", "kernels GB/s", "e2e GB/s", "CPU all-cores GB/s");
  for (bool gaps : {true, false}) {
    FileHeader fh;
    fh.chunk_size = 64u << 20;
    fh.flags = gaps ? kFlagGapArray : 0;
    const size_t nchunks = (in.size() + fh.chunk_size - 1) / fh.chunk_size;
    std::vector<std::vector<uint8_t>> chunks(nchunks);
    std::vector<uint8_t> out(in.size());
    double enc_k = 1e30, enc_e = 1e30, dec_k = 1e30, dec_e = 1e30, cpu_enc = 1e30, cpu_dec = 1e30;
    for (int r = 0; r < repeat; ++r) {
      double k = 0;
      auto t0 = Clock::now();
      for (size_t i = 0; i < nchunks; ++i) {
        const size_t off = i * fh.chunk_size, n = std::min<size_t>(fh.chunk_size, in.size() - off);
        codec.encode_chunk(in.data() + off, n, fh, chunks[i]);
        k += codec.last_times().kernel_ms / 1e3;
      }
      enc_e = std::min(enc_e, std::chrono::duration<double>(Clock::now() - t0).count());
      enc_k = std::min(enc_k, k);
      k = 0;
      t0 = Clock::now();
      for (size_t i = 0; i < nchunks; ++i) {
        const ChunkHeader h = read_chunk_header(chunks[i].data(), fh, i, 0);
        codec.decode_chunk(h, chunks[i].data(), fh, out.data() + i * fh.chunk_size, i, 0);
        k += codec.last_times().kernel_ms / 1e3;
      }
      dec_e = std::min(dec_e, std::chrono::duration<double>(Clock::now() - t0).count());
      dec_k = std::min(dec_k, k);
      if (out != in) {
        std::fprintf(stderr, "GPU round trip failed\n");
        std::exit(2);
      }
      Encoded e;
      DecoderScratch scratch;
      t0 = Clock::now();
      encode_all(in, fh, hpcnn::default_thread_count(), e);
      cpu_enc = std::min(cpu_enc, std::chrono::duration<double>(Clock::now() - t0).count());
      t0 = Clock::now();
      decode_all(e, fh, hpcnn::default_thread_count(), out, scratch);
      cpu_dec = std::min(cpu_dec, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::printf("%-28s %12.1f %12.2f %12.2f\n", gaps ? "encode (gap arrays)" : "encode (no gap arrays)", gb / enc_k, gb / enc_e,
                gb / cpu_enc);
    std::printf("%-28s %12.1f %12.2f %12.2f\n", gaps ? "decode (gap arrays)" : "decode (self-synchronizing)", gb / dec_k,
                gb / dec_e, gb / cpu_dec);
  }
  std::printf("goal on one H200: >= 100 GB/s kernel throughput for encode and gap-array decode\n");
}

}  // namespace

int main(int argc, char** argv) {
  int threads = hpcnn::default_thread_count(), repeat = 5;
  double burst_s = 0.02;
  bool gpu = false;
  std::string reference;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--repeat" && i + 1 < argc)
      repeat = std::atoi(argv[++i]);
    else if (a == "--burst-ms" && i + 1 < argc)
      burst_s = std::atof(argv[++i]) / 1e3;
    else if (a == "--gpu")
      gpu = true;
    else if (a == "--reference" && i + 1 < argc)
      reference = argv[++i];
    else
      files.push_back(a);
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: huffman_bench [--threads N] [--repeat R] [--burst-ms MS] [--reference TSV] [--gpu] FILE...\n");
    return 1;
  }
  FileHeader fh;  // defaults: L = 12, S = 256, 4 MiB chunks, gap arrays
  FileHeader fh128 = fh, fh_nogap = fh;
  fh128.segment_log2 = 7;
  fh_nogap.flags = 0;
  std::vector<Row> rows;
  // Per file: its data, encodings and buffers, and the best time of each variant.
  struct Bench {
    Row r;
    std::vector<uint8_t> in, out, z, back, h;
    Encoded e;
    DecoderScratch scratch;
  };
  std::vector<Bench> benches;
  for (const auto& f : files) {
    std::ifstream s(f, std::ios::binary);
    if (!s) {
      std::fprintf(stderr, "cannot read %s\n", f.c_str());
      return 1;
    }
    std::vector<uint8_t> in((std::istreambuf_iterator<char>(s)), std::istreambuf_iterator<char>());
    if (in.empty()) continue;
    Bench& b = benches.emplace_back();
    b.r.name = f.substr(f.find_last_of('/') + 1);
    b.r.size = in.size();
    b.r.entropy = entropy_bytes(in);
    b.in = std::move(in);
    b.out.resize(b.in.size());
    b.back.resize(b.in.size());
    Encoded e128, enogap;
    encode_all(b.in, fh128, 1, e128);
    encode_all(b.in, fh_nogap, 1, enogap);
    b.r.ours128 = e128.bytes;
    b.r.ours_nogap = enogap.bytes;
    b.r.enc1 = b.r.dec1 = b.r.encN = b.r.decN = b.r.zenc = b.r.zdec = b.r.henc = b.r.hdec = 1e30;
  }
  // A sample is a burst of back-to-back calls lasting at least burst_s (throughput, as when a
  // file has many chunks: threads stay awake and clocked up); the time per call is kept.
  auto timed = [&](double& best, auto&& fn) {
    const auto t0 = Clock::now();
    int calls = 0;
    double elapsed = 0;
    do {
      fn();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (elapsed < burst_s);
    best = std::min(best, elapsed / calls);
  };
  // Rounds over all files, every variant timed in each: a slow spell of a shared machine (they
  // last seconds) hits every variant and file alike and only some of the rounds; the best time
  // of each is kept.
#if defined(HPCNN_HAVE_HUFF0)
  huff0_peer::Codec huff0;
#endif
  for (int round = 0; round < repeat; ++round) {
    for (Bench& b : benches) {
      Row& r = b.r;
      timed(r.enc1, [&] { encode_all(b.in, fh, 1, b.e); });
      timed(r.dec1, [&] { decode_all(b.e, fh, 1, b.out, b.scratch); });
      if (b.out != b.in) {
        std::fprintf(stderr, "round trip failed: %s\n", r.name.c_str());
        std::exit(2);
      }
      timed(r.zenc, [&] { r.zlib = zlib_huffman(b.in, b.z); });
      timed(r.zdec, [&] { zlib_inflate(b.z, r.zlib, b.back); });
#if defined(HPCNN_HAVE_ZLIB)
      if (b.back != b.in) {
        std::fprintf(stderr, "zlib round trip failed: %s\n", r.name.c_str());
        std::exit(2);
      }
#endif
#if defined(HPCNN_HAVE_HUFF0)
      timed(r.henc, [&] { r.huff0 = huff0.encode(b.in, b.h); });
      timed(r.hdec, [&] { huff0.decode(b.h, r.huff0, b.back); });
      if (b.back != b.in) {
        std::fprintf(stderr, "huff0 round trip failed: %s\n", r.name.c_str());
        std::exit(2);
      }
#endif
      timed(r.encN, [&] { encode_all(b.in, fh, threads, b.e); });
      timed(r.decN, [&] { decode_all(b.e, fh, threads, b.out, b.scratch); });
      if (b.out != b.in) {
        std::fprintf(stderr, "round trip failed: %s\n", r.name.c_str());
        std::exit(2);
      }
      r.ours = b.e.bytes;
    }
  }
  for (const Bench& b : benches) rows.push_back(b.r);
  auto mbs = [](size_t n, double s) { return s > 1e29 ? 0.0 : static_cast<double>(n) / s / 1e6; };
  std::printf("%-22s %10s %10s %10s %10s %10s %10s %10s | %8s %8s %8s %8s | %8s %8s %8s %8s\n", "file", "size", "entropy",
              "zlib-huff", "huff0", "ours S=256", "S=128", "no-gap", "enc T=1", "dec T=1", "enc T=N", "dec T=N", "zlib enc",
              "zlib dec", "huff0 enc", "huff0 dec");
  Row tot;
  tot.name = "TOTAL";
  auto print = [&](const Row& r) {
    std::printf("%-22s %10zu %10.0f %10zu %10zu %10zu %10zu %10zu | %8.0f %8.0f %8.0f %8.0f | %8.0f %8.0f %8.0f %8.0f\n",
                r.name.c_str(), r.size, r.entropy, r.zlib, r.huff0, r.ours, r.ours128, r.ours_nogap, mbs(r.size, r.enc1),
                mbs(r.size, r.dec1), mbs(r.size, r.encN), mbs(r.size, r.decN), mbs(r.size, r.zenc), mbs(r.size, r.zdec),
                mbs(r.size, r.henc), mbs(r.size, r.hdec));
  };
  for (const auto& r : rows) {
    print(r);
    tot.size += r.size;
    tot.entropy += r.entropy;
    tot.zlib += r.zlib;
    tot.huff0 += r.huff0;
    tot.ours += r.ours;
    tot.ours128 += r.ours128;
    tot.ours_nogap += r.ours_nogap;
    tot.enc1 += r.enc1;
    tot.dec1 += r.dec1;
    tot.encN += r.encN;
    tot.decN += r.decN;
    tot.zenc += r.zenc;
    tot.zdec += r.zdec;
    tot.henc += r.henc;
    tot.hdec += r.hdec;
  }
  const Row& t = tot;
  if (rows.size() > 1) print(t);
  std::printf(
      "(sizes in bytes, speeds in MB/s of original data, in memory; T=N is %d threads; best of %d rounds of >= %.0f ms "
      "bursts)\n\n",
      threads, repeat, burst_s * 1e3);
  const double gap_cost = 100.0 * (static_cast<double>(t.ours) / t.zlib - 1),
               nogap_cost = 100.0 * (static_cast<double>(t.ours_nogap) / t.zlib - 1);
  const double enc_x = t.zenc / t.enc1, dec_x = t.zdec / t.dec1, enc_scale = t.enc1 / t.encN, dec_scale = t.dec1 / t.decN;
  auto verdict = [](bool ok) { return ok ? "met" : "NOT met"; };
  std::printf(
      "size vs zlib Huffman-only: S=256 %+.2f%% (goal <= +2%%: %s), no gap array %+.2f%% (goal <= 0%%: %s), S=128 %+.2f%%\n",
      gap_cost, verdict(gap_cost <= 2), nogap_cost, verdict(nogap_cost <= 0),
      100.0 * (static_cast<double>(t.ours128) / t.zlib - 1));
#if defined(HPCNN_HAVE_HUFF0)
  const double henc_x = t.henc / t.enc1, hdec_x = t.hdec / t.dec1;
  std::printf(
      "single-thread speed vs huff0 (S=256): encode %.2fx (goal >= 1: %s), decode %.2fx (goal >= 1: %s); huff0 size %+.2f%% vs "
      "zlib\n",
      henc_x, verdict(henc_x >= 1), hdec_x, verdict(hdec_x >= 1), 100.0 * (static_cast<double>(t.huff0) / t.zlib - 1));
#else
  std::printf("single-thread speed vs huff0: not measured (built without libzstd.a)\n");
#endif
  std::printf("single-thread speed vs zlib: encode %.1fx, decode %.1fx (earlier goals >= 7x / >= 6x: %s / %s)\n", enc_x, dec_x,
              verdict(enc_x >= 7), verdict(dec_x >= 6));
  std::printf("%d threads vs 1: encode %.2fx, decode %.2fx (earlier goal >= 1.7x: %s)\n", threads, enc_scale, dec_scale,
              verdict(enc_scale >= 1.7 && dec_scale >= 1.7));
  if (!reference.empty()) {
    std::ifstream ref(reference);
    if (!ref) {
      std::fprintf(stderr, "cannot read %s\n", reference.c_str());
      return 1;
    }
    std::map<std::string, std::pair<double, double>> before;
    std::string line;
    while (std::getline(ref, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream fields(line);
      std::string name;
      double gap = 0, nogap = 0;
      fields >> name >> gap >> nogap;
      before[name] = {gap, nogap};
    }
    double worst = -1e9;
    std::string worst_name;
    int compared = 0;
    for (const auto& r : rows) {
      const auto it = before.find(r.name);
      if (it == before.end()) continue;
      ++compared;
      for (double change : {100.0 * (r.ours / it->second.first - 1), 100.0 * (r.ours_nogap / it->second.second - 1)})
        if (change > worst) worst = change, worst_name = r.name;
    }
    if (compared > 0)
      std::printf(
          "per file vs the reference %s (%d files, S=256 and no gap array): largest change %+.3f%% (%s) (goal <= +0.2%%: %s)\n",
          reference.c_str(), compared, worst, worst_name.c_str(), verdict(worst <= 0.2));
  }
  if (gpu) gpu_section(files, repeat);
  return 0;
}
