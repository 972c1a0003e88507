#include "nn/threads.h"

#include <omp.h>
#include <sched.h>

#include <thread>

namespace hpcnn::nn {

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

void set_num_threads(int n) {
  // oneDNN here uses the OpenMP runtime: its primitives and sgemm follow omp_set_num_threads.
  omp_set_num_threads(n > 0 ? n : std::max(1, available_cores()));
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace hpcnn::nn
