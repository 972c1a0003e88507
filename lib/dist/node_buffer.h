// hpcnn dist: a read-only block of memory shared by the ranks of one node (Communicator::node_shared,
// dist/communicator.h): dist-train's node-local data cache (issue 44 item 3; the Fugaku CosmoFlow
// I/O tuning: data decoded once per node, not once per rank). The block lives as long as the last
// shared_ptr to it; with MPI its release is collective over the node (MPI_Win_free), so the ranks
// of a node must drop their blocks in the same order, before MPI_Finalize. A block dropped while an
// exception unwinds is not released (the other ranks may never come; the job is then aborted, and
// the MPI library removes the segment at its end).
#pragma once

#include <cstddef>

namespace hpcnn::dist {

class NodeBuffer {
 public:
  virtual ~NodeBuffer() = default;
  const void* data() const { return data_; }
  size_t size() const { return size_; }  // bytes
  // Whether the block is one copy for the node (MPI shared window), or this rank's own (a node of one).
  virtual bool shared() const = 0;

 protected:
  const void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace hpcnn::dist
