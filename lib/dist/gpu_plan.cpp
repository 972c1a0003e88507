#include "dist/gpu_plan.h"

#include <string>

#include "core/error.h"

namespace hpcnn::dist {

int pick_device(int rank, int local_rank, int local_size, int visible_devices, const std::string& host) {
  if (visible_devices < 1)
    throw_error(ErrorKind::device,
                "rank " + std::to_string(rank) + " on " + host + " sees no GPU (check CUDA_VISIBLE_DEVICES and the driver)");
  if (local_size > visible_devices)
    throw_error(ErrorKind::device, host + " runs " + std::to_string(local_size) + " ranks (local ranks 0.." +
                                       std::to_string(local_size - 1) + ", rank " + std::to_string(rank) +
                                       " among them) but sees " + std::to_string(visible_devices) + " GPU" +
                                       (visible_devices == 1 ? "" : "s") + ": start at most " + std::to_string(visible_devices) +
                                       " ranks per node (one GPU each) or make more devices visible");
  if (local_rank < 0 || local_rank >= local_size)
    throw_error(ErrorKind::usage,
                "local rank " + std::to_string(local_rank) + " is outside 0.." + std::to_string(local_size - 1));
  return local_rank;
}

std::vector<Bucket> plan_buckets(const FusedLayout& layout, size_t bucket_elements) {
  if (bucket_elements < 1) throw_error(ErrorKind::usage, "plan_buckets: the bucket size must be >= 1 element");
  std::vector<Bucket> out;
  const size_t K = layout.offset.size();
  size_t k = K;
  while (k > 0) {
    Bucket b;
    b.last = k - 1;
    size_t count = 0;
    while (k > 0 && count < bucket_elements) count += layout.count(--k);
    b.first = k;
    b.offset = layout.offset[b.first];
    b.count = count;
    out.push_back(b);
  }
  return out;
}

BucketTracker::BucketTracker(const FusedLayout& layout, std::vector<Bucket> buckets)
    : buckets_(std::move(buckets)), bucket_of_(layout.offset.size(), 0), seen_(layout.offset.size(), false) {
  for (size_t i = 0; i < buckets_.size(); ++i)
    for (size_t k = buckets_[i].first; k <= buckets_[i].last; ++k) bucket_of_[k] = i;
  reset();
}

void BucketTracker::reset() {
  missing_.assign(buckets_.size(), 0);
  for (size_t i = 0; i < buckets_.size(); ++i) missing_[i] = buckets_[i].last - buckets_[i].first + 1;
  seen_.assign(seen_.size(), false);
  next_ = 0;
}

std::vector<size_t> BucketTracker::ready(size_t buffer) {
  if (buffer >= seen_.size())
    throw_error(ErrorKind::usage,
                "gradient bucket tracker: buffer " + std::to_string(buffer) + " of " + std::to_string(seen_.size()));
  if (seen_[buffer])
    throw_error(ErrorKind::usage, "gradient bucket tracker: buffer " + std::to_string(buffer) + " announced twice in one step");
  seen_[buffer] = true;
  --missing_[bucket_of_[buffer]];
  std::vector<size_t> go;
  while (next_ < buckets_.size() && missing_[next_] == 0) go.push_back(next_++);
  return go;
}

}  // namespace hpcnn::dist
