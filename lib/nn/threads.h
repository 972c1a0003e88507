// hpcnn nn: the one place that sets intra-op parallelism for the engine (OpenMP loops, oneDNN's
// OpenMP runtime and its sgemm). n = 0 means all cores of this process's CPU affinity mask.
// dist-train sets one thread per rank when ranks share a machine.
#pragma once

namespace hpcnn::nn {

void set_num_threads(int n);
int num_threads();
// Cores in this process's CPU affinity mask (what set_num_threads(0) uses).
int available_cores();

}  // namespace hpcnn::nn
