// hpcnn nn: the one place that sets intra-op parallelism for the engine (OpenMP loops, oneDNN's
// OpenMP runtime and its sgemm). n = 0 means core/threads.h's rule for one process per node;
// dist-train passes that rule's count for the ranks on its node.
#pragma once

namespace hpcnn::nn {

void set_num_threads(int n);
int num_threads();

}  // namespace hpcnn::nn
