#include "nn/threads.h"

#include <omp.h>

#include "core/threads.h"

namespace hpcnn::nn {

void set_num_threads(int n) {
  // oneDNN here uses the OpenMP runtime: its primitives and sgemm follow omp_set_num_threads.
  omp_set_num_threads(n > 0 ? n : default_thread_count());
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace hpcnn::nn
