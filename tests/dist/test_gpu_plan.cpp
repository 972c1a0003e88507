// Host-side plans of GPU training (dist/gpu_plan.h): the device of a rank and the ranks-per-device
// check, and the gradient buckets of the overlapped allreduce with their release order.
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <random>

#include "../error_check.h"
#include "dist/gpu_plan.h"

using namespace hpcnn::dist;
using hpcnn::ErrorKind;

TEST_CASE("gpu plan: one GPU per local rank; more ranks than devices on a node is a device error naming it", "[dist][gpu_plan]") {
  for (int l = 0; l < 4; ++l) CHECK(pick_device(8 + l, l, 4, 4, "node07") == l);
  CHECK(pick_device(0, 0, 1, 8, "node07") == 0);  // fewer ranks than devices: the first ones
  const std::string msg =
      hpcnn::testing::check_error([] { pick_device(5, 1, 4, 2, "node07"); }, ErrorKind::device, "node07 runs 4 ranks");
  CHECK(msg.find("sees 2 GPUs") != std::string::npos);
  CHECK(msg.find("rank 5") != std::string::npos);
  hpcnn::testing::check_error([] { pick_device(0, 0, 1, 0, "node07"); }, ErrorKind::device, "sees no GPU");
}

TEST_CASE("gpu plan: buckets cover the fused buffer from its end, whole buffers, at least the bucket size", "[dist][gpu_plan]") {
  const std::vector<size_t> sizes{5, 300, 7, 120, 64, 64, 1000, 3};
  const FusedLayout layout = dense_layout(sizes);
  const std::vector<Bucket> b = plan_buckets(layout, 128);
  // By hand, from the end: {1000, 3} -> 1003; {64, 64} -> 128; {120, 7} -> 127 < 128, + 300 -> 427; {5}.
  REQUIRE(b.size() == 4);
  CHECK((b[0].first == 6 && b[0].last == 7 && b[0].count == 1003 && b[0].offset == layout.offset[6]));
  CHECK((b[1].first == 4 && b[1].last == 5 && b[1].count == 128));
  CHECK((b[2].first == 1 && b[2].last == 3 && b[2].count == 427));
  CHECK((b[3].first == 0 && b[3].last == 0 && b[3].count == 5 && b[3].offset == 0));
  size_t total = 0;
  for (const auto& x : b) total += x.count;
  CHECK(total == layout.total);
  CHECK(plan_buckets(dense_layout({}), 10).empty());
  CHECK(plan_buckets(layout, 1).size() == sizes.size());  // one buffer each
  CHECK(plan_buckets(layout, 1u << 30).size() == 1);
  hpcnn::testing::check_error([&] { plan_buckets(layout, 0); }, ErrorKind::usage, "bucket size");
}

TEST_CASE("gpu plan: buckets are released in plan order whatever order the gradients arrive in", "[dist][gpu_plan]") {
  const FusedLayout layout = dense_layout({5, 300, 7, 120, 64, 64, 1000, 3});
  BucketTracker t(layout, plan_buckets(layout, 128));
  // Backward order (last buffer first): each bucket goes as soon as it is whole.
  std::vector<size_t> sent;
  for (size_t k = 8; k-- > 0;)
    for (size_t i : t.ready(k)) sent.push_back(i);
  CHECK(sent == std::vector<size_t>{0, 1, 2, 3});
  CHECK(t.complete());
  t.reset();
  // Another order: bucket 1 is whole before bucket 0, but waits for it.
  CHECK(t.ready(4).empty());
  CHECK(t.ready(5).empty());
  CHECK(t.ready(7).empty());
  CHECK(t.ready(6) == std::vector<size_t>{0, 1});
  CHECK_FALSE(t.complete());
  hpcnn::testing::check_error([&] { t.ready(6); }, ErrorKind::usage, "announced twice");
  hpcnn::testing::check_error([&] { t.ready(8); }, ErrorKind::usage, "buffer 8 of 8");
  // Random orders: every bucket exactly once, in order.
  std::mt19937 rng(3);
  std::vector<size_t> order(8);
  for (int trial = 0; trial < 50; ++trial) {
    t.reset();
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<size_t> got;
    for (size_t k : order)
      for (size_t i : t.ready(k)) got.push_back(i);
    REQUIRE(got == std::vector<size_t>{0, 1, 2, 3});
  }
}
