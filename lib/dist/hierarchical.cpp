#include "dist/hierarchical.h"

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
