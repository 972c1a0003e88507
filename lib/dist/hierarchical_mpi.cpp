#include "dist/hierarchical_mpi.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace hpcnn::dist::detail {

MPI_Comm split_nodes(MPI_Comm world, int rank) {
  MPI_Comm node = MPI_COMM_NULL;
  const char* env = std::getenv("HPCNN_TEST_NODE_SPLIT");
  if (env == nullptr || *env == '\0') {
    if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
      throw_error(ErrorKind::device, "MPI_Comm_split_type failed on rank " + std::to_string(rank));
    return node;
  }
  const std::string spec = env;
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  int k = 0;
  if (colon != std::string::npos) {
    const std::string num = spec.substr(colon + 1);
    char* end = nullptr;
    const long v = std::strtol(num.c_str(), &end, 10);
    if (!num.empty() && *end == '\0' && v >= 1 && v <= 1 << 20) k = static_cast<int>(v);
  }
  if ((kind != "block" && kind != "cyclic") || k < 1)
    throw_error(ErrorKind::usage,
                "HPCNN_TEST_NODE_SPLIT='" + spec + "' is not block:K (node = rank / K) or cyclic:N (node = rank % N), K, N >= 1");
  const int color = kind == "block" ? rank / k : rank % k;
  if (MPI_Comm_split(world, color, rank, &node) != MPI_SUCCESS)
    throw_error(ErrorKind::device, "MPI_Comm_split (HPCNN_TEST_NODE_SPLIT) failed on rank " + std::to_string(rank));
  return node;
}

const char* hierarchical_sum(void* data, size_t count, MPI_Datatype type, size_t elem_bytes, MPI_Comm node, MPI_Comm cross,
                             std::vector<unsigned char>& scratch, int* rc) {
  int local_size = 1, local_rank = 0;
  MPI_Comm_size(node, &local_size);
  MPI_Comm_rank(node, &local_rank);
  const auto L = static_cast<size_t>(local_size);
  unsigned char* bytes = static_cast<unsigned char*>(data);
  constexpr size_t piece = size_t{1} << 30;  // MPI counts and displacements are int
  std::vector<int> counts(L), displs(L);
  for (size_t off = 0; off < count; off += piece) {
    const size_t n = std::min(piece, count - off);
    void* buf = bytes + off * elem_bytes;
    if (L == 1) {  // the node's reduce-scatter and allgather are copies of the whole buffer
      if ((*rc = MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(n), type, MPI_SUM, cross)) != MPI_SUCCESS)
        return "MPI_Allreduce (across nodes)";
      continue;
    }
    // Shards of the buffer padded to a multiple of L: shard i is [i * s, (i + 1) * s) clipped to n.
    const size_t s = (n + L - 1) / L;
    for (size_t i = 0; i < L; ++i) {
      const size_t first = std::min(n, i * s);
      displs[i] = static_cast<int>(first);
      counts[i] = static_cast<int>(std::min(n, first + s) - first);
    }
    const int mine = counts[static_cast<size_t>(local_rank)];
    if (scratch.size() < s * elem_bytes) scratch.resize(s * elem_bytes);
    void* shard = scratch.data();
    if ((*rc = MPI_Reduce_scatter(buf, shard, counts.data(), type, MPI_SUM, node)) != MPI_SUCCESS)
      return "MPI_Reduce_scatter (inside the node)";
    if ((*rc = MPI_Allreduce(MPI_IN_PLACE, shard, mine, type, MPI_SUM, cross)) != MPI_SUCCESS)
      return "MPI_Allreduce (across nodes)";
    if ((*rc = MPI_Allgatherv(shard, mine, type, buf, counts.data(), displs.data(), type, node)) != MPI_SUCCESS)
      return "MPI_Allgatherv (inside the node)";
  }
  return nullptr;
}

}  // namespace hpcnn::dist::detail
