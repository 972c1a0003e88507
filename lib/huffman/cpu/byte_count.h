// hpcnn huffman: byte histograms for the CPU encoder (every byte counted once, exactly).
//
// byte_histogram() counts with sixteen interleaved 16-bit sub-histograms: one counter increment
// (a load and a store) per byte, bound by the store port at about one cycle per byte.
// UnitCounter counts the encoder's 16 KiB units and takes the most frequent byte values out
// first: it compares every 64 bytes (AVX-512 VBMI2) or 32 bytes (AVX2) with up to four values
// (those most frequent in the unit counted before), counts their matches, and compresses the
// other bytes (vpcompressb; with AVX2 a pshufb per 8 bytes from an index table) into a buffer
// that the scalar loop then counts. On Fashion-MNIST (half the bytes 0) that halves the scalar
// work; with AVX-512 on text four values take out about a third; data without frequent values
// (JPEG) keeps the plain loop, as does text with AVX2 (its compress costs more). Which values
// and how many only change the speed, never the counts (tests compare with a plain loop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace hpcnn::huffman {

// Adds the byte histogram of `n` bytes to counts.
void byte_histogram(const uint8_t* in, size_t n, uint64_t counts[256]);

// Counts units of at most 65535 bytes, one after the other (the previous unit's histogram picks
// the values to take out). Not thread-safe: one per thread.
class UnitCounter {
 public:
  static constexpr size_t kMaxUnit = 65535;
  UnitCounter();
  ~UnitCounter();
  UnitCounter(const UnitCounter&) = delete;
  UnitCounter& operator=(const UnitCounter&) = delete;
  // Sets counts[s] to the number of bytes s in in[0..n), n <= kMaxUnit (else a usage error).
  void count(const uint8_t* in, size_t n, uint64_t counts[256]);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// The take-out paths, slowest first; UnitCounter uses the best this CPU has (x86-64: AVX-512
// F, BW and VBMI2; AVX2; with POPCNT) up to a limit that tests lower to compare the paths on
// one machine.
enum class TakeoutPath { scalar, avx2, avx512 };
TakeoutPath value_takeout_path();
void set_value_takeout_limit(TakeoutPath limit);

}  // namespace hpcnn::huffman
