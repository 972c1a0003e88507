#include "core/threads.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace hpcnn {

int affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return online_cores();
}

int online_cores() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int default_thread_count(int ranks_on_node) {
  const int mask = affinity_cores(), node = online_cores();
  if (mask < node) return mask;  // bound by the launcher: its mask is this rank's share
  return std::max(1, node / std::max(1, ranks_on_node));
}

}  // namespace hpcnn
