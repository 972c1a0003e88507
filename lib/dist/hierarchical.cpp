#include "dist/hierarchical.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/error.h"

namespace hpcnn::dist {

const char* to_string(SumAlgorithm a) { return a == SumAlgorithm::hierarchical ? "hierarchical" : "flat"; }

SumChoice choose_sum_algorithm(const std::string& requested, int nodes, int local_size, bool nodes_uniform) {
  if (requested != "flat" && requested != "hierarchical" && requested != "auto")
    throw_error(ErrorKind::usage, "exchange.algorithm '" + requested + "' is not one of: flat, hierarchical, auto");
  const std::string shape = std::to_string(nodes) + (nodes == 1 ? " node" : " nodes");
  if (requested == "flat") return {SumAlgorithm::flat, "requested (" + shape + ")", false};
  if (!nodes_uniform)
    return {SumAlgorithm::flat,
            shape + " with unequal rank counts: the hierarchical allreduce needs the same number of ranks on every node",
            requested == "hierarchical"};
  const std::string layout = shape + " x " + std::to_string(local_size) + (local_size == 1 ? " rank" : " ranks");
  if (requested == "hierarchical") return {SumAlgorithm::hierarchical, "requested (" + layout + ")", false};
  if (nodes < 2) return {SumAlgorithm::flat, "auto: " + layout + " (one node: nothing crosses a node boundary)", false};
  if (local_size < 2)
    return {SumAlgorithm::flat, "auto: " + layout + " (one rank per node: nothing to reduce inside a node)", false};
  return {SumAlgorithm::hierarchical, "auto: " + layout, false};
}

SumChoice choose_sum_algorithm(const std::string& requested, const Communicator& comm) {
  return choose_sum_algorithm(requested, comm.node_count(), comm.local_size(), comm.nodes_uniform());
}

SumChoice choose_sum_algorithm_measured(const std::string& requested, Communicator& comm, float* data, size_t count, int rounds) {
  SumChoice rule = choose_sum_algorithm(requested, comm);
  if (requested != "auto" || rule.algorithm != SumAlgorithm::hierarchical || count == 0) return rule;
  std::fill(data, data + count, 0.0f);
  std::vector<double> ms[2];
  for (int call = -1; call < std::max(1, rounds); ++call)
    for (const SumAlgorithm a : {SumAlgorithm::flat, SumAlgorithm::hierarchical}) {
      comm.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      allreduce_sum(comm, data, count, a);
      int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
      comm.allreduce_max(&ns, 1);
      if (call >= 0) ms[a == SumAlgorithm::hierarchical].push_back(static_cast<double>(ns) * 1e-6);
    }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double flat = median(ms[0]), hier = median(ms[1]);
  rule.algorithm = hier < flat ? SumAlgorithm::hierarchical : SumAlgorithm::flat;
  char text[160];
  std::snprintf(text, sizeof text, ", measured on %.2f MiB: flat %.3f ms, hierarchical %.3f ms (medians of %d)",
                static_cast<double>(count) * sizeof(float) / (1 << 20), flat, hier, std::max(1, rounds));
  rule.reason += text;
  return rule;
}

void allreduce_sum(Communicator& comm, float* data, size_t count, SumAlgorithm algorithm) {
  if (algorithm == SumAlgorithm::hierarchical)
    comm.hierarchical_allreduce_sum(data, count);
  else
    comm.allreduce_sum(data, count);
}

void allreduce_sum(Communicator& comm, double* data, size_t count, SumAlgorithm algorithm) {
  if (algorithm == SumAlgorithm::hierarchical)
    comm.hierarchical_allreduce_sum(data, count);
  else
    comm.allreduce_sum(data, count);
}

}  // namespace hpcnn::dist
