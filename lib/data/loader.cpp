#include "data/loader.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "data/augment_volume.h"
#include "data/epoch_plan.h"

namespace hpcnn::data {

BatchLoader::BatchLoader(std::shared_ptr<const SampleSource> source, LoaderOptions options)
    : source_(std::move(source)), options_(std::move(options)) {
  if (!source_) throw_error(ErrorKind::usage, "BatchLoader: no sample source");
  const LoaderOptions& o = options_;
  if (o.prefetch < 1) throw_error(ErrorKind::usage, "loader: prefetch must be >= 1, got " + std::to_string(o.prefetch));
  if (o.threads < 1) throw_error(ErrorKind::usage, "loader: threads must be >= 1, got " + std::to_string(o.threads));
  check_augment_for(o.augment, source_->sample());
  const SampleInfo& sample = source_->sample();
  if (o.slabs < 1 || o.slab < 0 || o.slab >= o.slabs)
    throw_error(ErrorKind::usage, "loader: slab " + std::to_string(o.slab) + " of " + std::to_string(o.slabs) + " slabs");
  if (o.slabs > 1 && (!sample.volume() || sample.depth % o.slabs != 0))
    throw_error(ErrorKind::usage, source_->origin() + ": " + to_string(sample) + " samples do not split into " +
                                      std::to_string(o.slabs) + " depth slabs" +
                                      (sample.volume() ? " (the depth does not divide)" : " (not volumes)"));
  norm_ = Normalizer(source_->sample(), o.augment.mean, o.augment.std, o.augment.log1p);
  const int64_t n = source_->size();
  if (o.mode == LoaderMode::train) {
    steps_ = train_steps_per_epoch(n, o.world_size, o.batch_size);
    if (steps_ == 0)
      throw_error(ErrorKind::usage, source_->origin() + ": " + std::to_string(n) + " samples are fewer than one step of " +
                                        std::to_string(o.world_size) + " ranks x batch size " + std::to_string(o.batch_size));
    samples_ = steps_ * o.batch_size;
  } else {
    steps_ = eval_steps(n, o.rank, o.world_size, o.batch_size);
    const auto [b, e] = eval_shard(n, o.rank, o.world_size);
    samples_ = e - b;
  }
  if (o.mode == LoaderMode::train && (o.rank < 0 || o.rank >= o.world_size))
    throw_error(ErrorKind::usage, "rank " + std::to_string(o.rank) + " outside [0, " + std::to_string(o.world_size) + ")");
  augment_next_ = augment_epoch_ = o.augment_enabled;
  thread_ = std::thread([this] { run(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  cv_ready_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BatchLoader::set_augment(bool on) {
  std::lock_guard lk(mu_);
  augment_next_ = on;
}

void BatchLoader::start_epoch(int64_t epoch) {
  if (epoch < 0) throw_error(ErrorKind::usage, "loader: epoch must be >= 0, got " + std::to_string(epoch));
  std::deque<Batch> old;
  {
    std::lock_guard lk(mu_);
    if (error_) std::rethrow_exception(error_);
    ++generation_;
    epoch_ = epoch;
    augment_epoch_ = augment_next_;
    old.swap(queue_);  // freed outside the lock
    delivered_ = 0;
    started_ = true;
  }
  cv_work_.notify_all();
}

std::optional<Batch> BatchLoader::next_batch() {
  std::unique_lock lk(mu_);
  if (!started_) throw_error(ErrorKind::usage, "loader: next_batch() before start_epoch()");
  if (error_ && queue_.empty()) std::rethrow_exception(error_);
  if (delivered_ == steps_) return std::nullopt;
  cv_ready_.wait(lk, [&] { return !queue_.empty() || error_; });
  if (queue_.empty()) std::rethrow_exception(error_);
  Batch b = std::move(queue_.front());
  queue_.pop_front();
  ++delivered_;
  lk.unlock();
  cv_work_.notify_all();
  return b;
}

size_t BatchLoader::ready() const {
  std::lock_guard lk(mu_);
  return queue_.size();
}

std::vector<int64_t> BatchLoader::batch_indices(int64_t step, const std::vector<int64_t>& perm) const {
  const LoaderOptions& o = options_;
  std::vector<int64_t> idx;
  if (o.mode == LoaderMode::train) {
    const int64_t start = train_batch_start(step, o.rank, o.world_size, o.batch_size);
    idx.assign(perm.begin() + start, perm.begin() + start + o.batch_size);
  } else {
    const auto [b, e] = eval_shard(source_->size(), o.rank, o.world_size);
    const int64_t first = b + step * o.batch_size, last = std::min(e, first + o.batch_size);
    for (int64_t i = first; i < last; ++i) idx.push_back(i);
  }
  return idx;
}

Batch BatchLoader::build(int64_t epoch, int64_t step, bool augment, const std::vector<int64_t>& perm) const {
  const SampleInfo& s = source_->sample();
  Batch b;
  b.epoch = epoch;
  b.step = step;
  b.indices = batch_indices(step, perm);
  const auto n = static_cast<int64_t>(b.indices.size());
  // Spatial split: planes [first, first + planes) of each (augmented) volume.
  const int64_t planes = s.depth / options_.slabs, first = options_.slab * planes;
  const bool slabbed = options_.slabs > 1;
  Shape shape{n};
  for (int64_t d : s.dims()) shape.push_back(d);
  if (slabbed) shape[2] = planes;
  b.images = Tensor(shape);
  const bool labeled = source_->has_labels();
  if (labeled) b.labels.resize(static_cast<size_t>(n));
  const int64_t K = source_->target_width();
  if (K > 0) b.targets = Tensor({n, K});
  const int64_t numel = s.numel() / options_.slabs;
  const bool aug = augment && options_.mode == LoaderMode::train;

  auto one = [&](int64_t j, std::vector<uint8_t>& scratch) {
    const int64_t index = b.indices[static_cast<size_t>(j)];
    int32_t label = -1;
    float* dst = b.images.data() + j * numel;
    if (slabbed) {
      VolumeDraw draw;
      if (aug) {
        std::mt19937_64 rng(sample_seed(options_.seed, epoch, index));
        draw = draw_volume_augment(options_.augment, rng);
      }
      source_->read_box(index, input_slab(s, draw, first, planes), scratch.data(), &label);
      transform_volume_slab(scratch.data(), s, draw, norm_, first, planes, dst);
    } else {
      source_->read(index, scratch.data(), &label);
      if (aug) {
        std::mt19937_64 rng(sample_seed(options_.seed, epoch, index));
        augment_sample(scratch.data(), s, options_.augment, norm_, true, rng, dst);
      } else {
        normalise_sample(scratch.data(), s, norm_, dst);
      }
    }
    if (labeled) b.labels[static_cast<size_t>(j)] = label;
    if (K > 0) source_->read_targets(index, b.targets.data() + j * K);
  };

  if (options_.threads == 1 || n < 2) {
    std::vector<uint8_t> scratch(s.bytes());
    for (int64_t j = 0; j < n; ++j) one(j, scratch);
    return b;
  }
  // threads > 1: helpers take every T-th sample (plain std::threads, started per batch: cheap next
  // to a batch, and no OpenMP team competing with the training thread's).
  const int T = static_cast<int>(std::min<int64_t>(options_.threads, n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(T));
  auto part = [&](int t) {
    try {
      std::vector<uint8_t> scratch(s.bytes());
      for (int64_t j = t; j < n; j += T) one(j, scratch);
    } catch (...) {
      errors[static_cast<size_t>(t)] = std::current_exception();
    }
  };
  std::vector<std::thread> helpers;
  try {
    for (int t = 1; t < T; ++t) helpers.emplace_back(part, t);
  } catch (...) {  // could not start a thread: finish the ones started, then report
    for (auto& h : helpers) h.join();
    throw;
  }
  part(0);
  for (auto& h : helpers) h.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return b;
}

void BatchLoader::run() {
  uint64_t done = 0;
  for (;;) {
    uint64_t gen;
    int64_t epoch;
    bool augment;
    {
      std::unique_lock lk(mu_);
      cv_work_.wait(lk, [&] { return stop_ || (generation_ != done && !error_); });
      if (stop_) return;
      gen = generation_;
      epoch = epoch_;
      augment = augment_epoch_;
    }
    int64_t step = 0;
    try {
      const std::vector<int64_t> perm =
          options_.mode == LoaderMode::train ? epoch_permutation(source_->size(), options_.seed, epoch) : std::vector<int64_t>{};
      for (; step < steps_; ++step) {
        {
          std::lock_guard lk(mu_);
          if (stop_) return;
          if (generation_ != gen) break;
        }
        Batch b = build(epoch, step, augment, perm);
        {
          std::unique_lock lk(mu_);
          cv_work_.wait(lk,
                        [&] { return stop_ || generation_ != gen || queue_.size() < static_cast<size_t>(options_.prefetch); });
          if (stop_) return;
          if (generation_ != gen) break;
          queue_.push_back(std::move(b));
        }
        cv_ready_.notify_all();
      }
    } catch (...) {
      const std::string where = "while loading epoch " + std::to_string(epoch) + ", step " + std::to_string(step) + " (rank " +
                                std::to_string(options_.rank) + ")";
      std::exception_ptr e;
      try {
        throw;
      } catch (const Error& err) {
        e = std::make_exception_ptr(err.with_context(where));
      } catch (...) {
        e = std::current_exception();
      }
      {
        std::lock_guard lk(mu_);
        if (generation_ == gen) error_ = e;
      }
      cv_ready_.notify_all();
    }
    done = gen;
  }
}

}  // namespace hpcnn::data
