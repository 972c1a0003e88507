// hpcnn dist: the host-side decisions of data-parallel training on GPUs (issue 19), kept free of
// CUDA and NCCL so that CPU tests cover them.
//
// Device choice: one GPU per rank, rank r of a node taking the node's visible device number
// local_rank (CUDA_VISIBLE_DEVICES numbering). Before NCCL starts, every rank checks that its node
// runs no more ranks than it sees devices; NCCL would otherwise fail later with "Duplicate GPU
// detected". ErrorKind::device, naming the host, the ranks and the device count.
//
// Gradient buckets for an allreduce overlapped with the backward pass (PyTorch DDP's scheme;
// Goyal et al. 2017 and the NEEBS/Fugaku recipes overlap the same way): the fused gradient
// buffer (dist/fused_layout.h, buffers in parameter order) is cut into contiguous ranges of whole
// buffers, formed from the last buffer backwards, since the gradients become final in backward
// order (nn::Model::set_gradient_ready_hook); each bucket holds at least `bucket_elements` (the
// last formed, at the front of the buffer, may hold fewer) and is sent as one allreduce as soon as
// all its buffers are ready. BucketTracker enforces the one order every rank must use: bucket i
// is released only after bucket i-1, whatever order the readiness comes in.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "dist/fused_layout.h"

namespace hpcnn::dist {

// The device of a rank: local_rank, after checking local_size <= visible_devices (>= 1).
int pick_device(int rank, int local_rank, int local_size, int visible_devices, const std::string& host);

struct Bucket {
  size_t first = 0, last = 0;    // buffers [first, last] of the layout (contiguous)
  size_t offset = 0, count = 0;  // elements [offset, offset + count) of the fused buffer
};

// Buckets in sending order: bucket 0 ends at the fused buffer's end (its last buffers are ready
// first). bucket_elements >= 1 (ErrorKind::usage otherwise); an empty layout has no bucket.
std::vector<Bucket> plan_buckets(const FusedLayout& layout, size_t bucket_elements);

class BucketTracker {
 public:
  explicit BucketTracker(const FusedLayout& layout, std::vector<Bucket> buckets);
  // Buffer k's gradient is final: returns the buckets that may go now, in order (possibly none).
  // A buffer marked twice in one step, or an index out of range, is ErrorKind::usage.
  std::vector<size_t> ready(size_t buffer);
  // All buckets released this step? Then the next step starts.
  bool complete() const { return next_ == buckets_.size(); }
  void reset();
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // per buffer
  std::vector<size_t> missing_;    // per bucket: buffers not yet ready
  std::vector<bool> seen_;         // per buffer, this step
  size_t next_ = 0;                // the next bucket to release
};

}  // namespace hpcnn::dist
