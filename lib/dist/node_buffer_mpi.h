// hpcnn dist, internal to the MPI communicator: the node-shared block of Communicator::node_shared
// (dist/node_buffer.h) as an MPI-3 shared window on the node communicator.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "dist/node_buffer.h"

namespace hpcnn::dist::detail {

// Collective over `node`: MPI_Win_allocate_shared of `bytes` (local rank 0's value, broadcast in
// `node`; the others allocate 0 bytes) on local rank 0, filled there by `fill`, then a barrier in
// `node` and MPI_Win_shared_query on the others. The pages wholly inside the block are made
// read-only (mprotect) in every rank's mapping once filled. ErrorKind::device naming the call, the
// size, `where` (rank and host) when an MPI call fails.
std::shared_ptr<const NodeBuffer> node_shared_window(MPI_Comm node, size_t bytes, const std::function<void(void*)>& fill,
                                                     const std::string& where);

}  // namespace hpcnn::dist::detail
