// hpcnn data: which samples each rank reads in each epoch (data-parallel training), and seeds.
//
// Training: every epoch has its own permutation of the N samples, the same on every rank (it
// depends only on the seed and the epoch). With world size W and per-rank batch B, every rank
// runs steps_per_epoch = floor(N / (W*B)) steps, and at step s rank r takes positions
// [(s*W + r)*B, (s*W + r + 1)*B) of the permutation: the ranks' batches of one step are
// disjoint, together the global batch of W*B samples. The remainder, the last N mod (W*B)
// positions of the permutation, is dropped for that epoch; since the permutation changes every
// epoch, different samples are dropped each time and every sample is used in expectation
// (1 - (N mod W*B)/N) of the epochs. Every rank runs the same number of steps, so collectives
// per step (allreduce) always match up.
// Evaluation: no shuffling, every sample once: rank r takes the contiguous shard
// [floor(N*r/W), floor(N*(r+1)/W)) in batches of B, the last one smaller. Shards differ in size
// by at most one sample, so ranks may run different numbers of steps (differing by at most one):
// sum counts across ranks after the loop, not per step.
// Errors: ErrorKind::usage for W < 1, r outside [0, W), B < 1, N < 0.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace hpcnn::data {

// A 64-bit mix of three values (SplitMix64 finaliser chain): seeds for independent streams.
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c);

// Uniform in [0, n) without modulo bias (n > 0).
uint64_t uniform_below(std::mt19937_64& rng, uint64_t n);

// The permutation of [0, n) for `epoch`: Fisher-Yates driven by std::mt19937_64 seeded with
// mix_seed(seed, epoch, stream 0x5045524d) ("PERM"). Identical on every rank and platform.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

// The seed of sample `index`'s augmentation draws in `epoch` (independent of rank and world size).
uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t index);

// floor(n / (world_size * batch)).
int64_t train_steps_per_epoch(int64_t n, int world_size, int64_t batch);

// First permutation position of rank `rank`'s batch at step `step` ((step*W + rank) * B).
int64_t train_batch_start(int64_t step, int rank, int world_size, int64_t batch);

// Rank `rank`'s evaluation shard [begin, end).
std::pair<int64_t, int64_t> eval_shard(int64_t n, int rank, int world_size);

// ceil(shard size / batch).
int64_t eval_steps(int64_t n, int rank, int world_size, int64_t batch);

}  // namespace hpcnn::data
