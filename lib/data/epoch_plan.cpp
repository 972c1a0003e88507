#include "data/epoch_plan.h"

#include <string>

#include "core/error.h"

namespace hpcnn::data {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void check(int64_t n, int rank, int world_size, int64_t batch) {
  if (world_size < 1) throw_error(ErrorKind::usage, "world size must be >= 1, got " + std::to_string(world_size));
  if (rank < 0 || rank >= world_size)
    throw_error(ErrorKind::usage, "rank " + std::to_string(rank) + " outside [0, " + std::to_string(world_size) + ")");
  if (batch < 1) throw_error(ErrorKind::usage, "batch size must be >= 1, got " + std::to_string(batch));
  if (n < 0) throw_error(ErrorKind::usage, "negative sample count " + std::to_string(n));
}

}  // namespace

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) { return splitmix64(splitmix64(splitmix64(a) ^ b) ^ c); }

uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n: values below it would bias the result
  for (;;) {
    const uint64_t x = rng();
    if (x >= threshold) return x % n;
  }
}

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  if (n < 0) throw_error(ErrorKind::usage, "negative sample count " + std::to_string(n));
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  std::mt19937_64 rng(mix_seed(seed, static_cast<uint64_t>(epoch), 0x5045524dull));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<size_t>(uniform_below(rng, static_cast<uint64_t>(i) + 1));
    std::swap(p[static_cast<size_t>(i)], p[j]);
  }
  return p;
}

uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t index) {
  return mix_seed(seed ^ 0x4155474dull /* "AUGM" */, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index));
}

int64_t train_steps_per_epoch(int64_t n, int world_size, int64_t batch) {
  check(n, 0, world_size, batch);
  return n / (static_cast<int64_t>(world_size) * batch);
}

int64_t train_batch_start(int64_t step, int rank, int world_size, int64_t batch) { return (step * world_size + rank) * batch; }

std::pair<int64_t, int64_t> eval_shard(int64_t n, int rank, int world_size) {
  check(n, rank, world_size, 1);
  const auto W = static_cast<unsigned __int128>(world_size), N = static_cast<unsigned __int128>(n);
  return {static_cast<int64_t>(N * static_cast<unsigned>(rank) / W),
          static_cast<int64_t>(N * static_cast<unsigned>(rank + 1) / W)};
}

int64_t eval_steps(int64_t n, int rank, int world_size, int64_t batch) {
  check(n, rank, world_size, batch);
  const auto [b, e] = eval_shard(n, rank, world_size);
  return (e - b + batch - 1) / batch;
}

}  // namespace hpcnn::data
