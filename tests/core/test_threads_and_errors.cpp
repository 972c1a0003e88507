// core/threads.h's one rule for thread counts, and core/device_error.h's report of failed
// device/library calls.
#include <sched.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "core/device_error.h"
#include "core/error.h"
#include "core/threads.h"
#include "error_check.h"

using namespace hpcnn;

TEST_CASE("thread count: the launcher's binding, else the node's cores divided among its ranks", "[core]") {
  cpu_set_t saved;
  REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
  const int node = online_cores();
  REQUIRE(node >= 1);
  if (affinity_cores() == node) {  // not bound: cores / ranks on the node, at least 1
    CHECK(default_thread_count(1) == node);
    CHECK(default_thread_count(2) == std::max(1, node / 2));
    CHECK(default_thread_count(node + 5) == 1);
  }
  if (node >= 2) {  // bound to one core (as mpirun --bind-to core does): that core, whatever the ranks
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &saved)) {
        CPU_SET(c, &one);
        break;
      }
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    CHECK(affinity_cores() == 1);
    CHECK(default_thread_count(1) == 1);
    CHECK(default_thread_count(4) == 1);
    REQUIRE(sched_setaffinity(0, sizeof saved, &saved) == 0);
  }
}

TEST_CASE("a failed device call is reported with the call, file:line, rank and host", "[core]") {
  const std::string msg = testing::check_error([] { throw_device_error("cudaMalloc(&p, n)", "lib/x.cu", 42, "out of memory"); },
                                               ErrorKind::device, "cudaMalloc(&p, n) failed at lib/x.cu:42 (host ");
  CHECK_THAT(msg, Catch::EndsWith("): out of memory"));
  set_process_identity(3, "node07");
  testing::check_error([] { throw_device_error("ncclAllReduce(...)", "f.cpp", 7, "unhandled system error"); }, ErrorKind::device,
                       "ncclAllReduce(...) failed at f.cpp:7 (rank 3 on node07): unhandled system error");
  CHECK(process_identity() == "rank 3 on node07");
}
