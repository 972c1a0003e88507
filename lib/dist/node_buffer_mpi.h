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
// `node`; the others allocate 0 bytes), MPI_Win_shared_query of local rank 0's segment on every
// rank, `fill` on local rank 0, then a barrier in `node`. The pages wholly inside the block are made
// read-only (mprotect) in every rank's mapping once filled. When the window is not a shared one
// (the query fails alike on every rank): nullptr with the reason in *unavailable, or
// ErrorKind::device when `unavailable` is null. ErrorKind::device naming the call, the size and
// `where` (rank and host) when another MPI call fails.
std::shared_ptr<const NodeBuffer> node_shared_window(MPI_Comm node, size_t bytes, const std::function<void(void*)>& fill,
                                                     const std::string& where, std::string* unavailable);

}  // namespace hpcnn::dist::detail
