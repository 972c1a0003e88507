// hpcnn data: the batch loader of dist-train and bn-polish: a background thread that reads,
// augments and normalises samples into fp32 NCHW batches ahead of the training loop.
//
// Which samples each rank gets, per epoch, is data/epoch_plan.h: training mode shuffles with a
// per-epoch permutation identical on every rank, all ranks run floor(N / (W*B)) steps and the
// remainder N mod (W*B) is dropped for that epoch (different samples each epoch); evaluation mode
// reads this rank's contiguous shard in order, every sample once, the last batch smaller.
//
// Augmentation (data/augment.h) runs in training mode while enabled; set_augment(false) before
// start_epoch turns it off for that epoch and later ones (Final Polishing, Kasagi et al.,
// HPDC 2020: the last epochs train on non-augmented data). Evaluation mode only normalises.
// Each sample's random draws are seeded from (seed, epoch, sample index), so a batch is the same
// whatever the thread count, rank or world size.
//
// Memory: the loader holds at most `prefetch` finished batches plus the one it is building
// (a bounded queue: the thread waits when it is full), plus what the source keeps (everything
// for InMemorySource, labels only for FileSource: see data/source.h).
//
// Threading: one loader thread per BatchLoader (with `threads` > 1 it assembles a batch with that
// many threads). The public methods are for one consumer thread. The destructor stops and joins
// the thread, also mid-epoch.
// Errors: the constructor throws ErrorKind::usage for bad options (rank/world size, batch < 1,
// prefetch < 1, threads < 1, bad mean/std) and, in training mode, when N < W*B (no full step).
// An exception in the loader thread (e.g. a truncated file: bad_input naming the file and
// offset) is rethrown by the next next_batch() call, after the batches completed before it, with
// "while loading epoch E, step S (rank R)" appended; the loader then stays failed (every later
// next_batch() and start_epoch() rethrows it).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/augment.h"
#include "data/source.h"
#include "tensor/tensor.h"

namespace hpcnn::data {

enum class LoaderMode : uint8_t { train, evaluate };

struct LoaderOptions {
  LoaderMode mode = LoaderMode::train;
  int64_t batch_size = 0;       // B: samples per batch on this rank
  int rank = 0;                 // r
  int world_size = 1;           // W
  uint64_t seed = 0;            // permutations and augmentation draws
  int prefetch = 2;             // Q: finished batches kept ready (>= 1)
  int threads = 1;              // threads assembling one batch (>= 1)
  Augmentation augment;         // crop padding, flip, mean/std (mean/std apply in every mode)
  bool augment_enabled = true;  // initial set_augment() state (training mode only)
  // Spatial split (nn/spatial.h): this rank's depth slab `slab` of `slabs` of every volume, planes
  // [slab * D / slabs, (slab + 1) * D / slabs) of the augmented sample. Only the input slab that
  // those planes come from is read (SampleSource::read_box: a slab along the input axis that the
  // axis permutation puts first, mirrored when that axis is flipped), so each rank of a group
  // reads 1/slabs of a sample's bytes. The ranks of a group pass the same rank/world_size/seed,
  // hence draw the same samples and augmentations. ErrorKind::usage for slabs > 1 on images or
  // when slabs does not divide D, and for slab outside [0, slabs).
  int slab = 0;
  int slabs = 1;
};

struct Batch {
  Tensor images;                 // [n, C, H, W] or [n, C, D / slabs, H, W] fp32, plain layout; n = B except evaluation's last
  std::vector<int32_t> labels;   // n class labels; empty when the source has no labels
  Tensor targets;                // [n, K] fp32 regression targets; empty (rank 0) when the source has none
  std::vector<int64_t> indices;  // the samples' indices in the source
  int64_t epoch = 0;
  int64_t step = 0;  // 0-based within the epoch
};

class BatchLoader {
 public:
  BatchLoader(std::shared_ptr<const SampleSource> source, LoaderOptions options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  const SampleSource& source() const { return *source_; }
  const LoaderOptions& options() const { return options_; }
  // This rank's steps per epoch (training: the same on every rank) and samples per epoch.
  int64_t steps_per_epoch() const { return steps_; }
  int64_t samples_per_epoch() const { return samples_; }

  // Augmentation on/off from the next start_epoch() (training mode; ignored in evaluation mode).
  void set_augment(bool on);
  // Starts loading `epoch` (>= 0; any order). Batches not yet taken from a previous epoch are
  // discarded.
  void start_epoch(int64_t epoch);
  // The next batch of the current epoch, waiting for the loader thread when none is ready;
  // std::nullopt after the epoch's last batch. ErrorKind::usage before the first start_epoch().
  std::optional<Batch> next_batch();

  // Finished batches waiting in the queue (for tests and logging; <= prefetch).
  size_t ready() const;

 private:
  void run();
  Batch build(int64_t epoch, int64_t step, bool augment, const std::vector<int64_t>& perm) const;
  std::vector<int64_t> batch_indices(int64_t step, const std::vector<int64_t>& perm) const;

  std::shared_ptr<const SampleSource> source_;
  LoaderOptions options_;
  Normalizer norm_;
  int64_t steps_ = 0, samples_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_work_;   // the loader thread waits for an epoch or queue space
  std::condition_variable cv_ready_;  // the consumer waits for a batch or an error
  std::deque<Batch> queue_;
  uint64_t generation_ = 0;  // bumped by start_epoch(); batches of older ones are dropped
  int64_t epoch_ = -1;
  bool augment_next_ = true;   // set_augment() state
  bool augment_epoch_ = true;  // the current epoch's
  int64_t delivered_ = 0;      // batches of the current epoch handed out
  bool started_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace hpcnn::data
