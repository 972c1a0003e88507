// hpcnn measure: the node-local data cache of dist-train and bn-polish (issue 44 item 3; the Fugaku CosmoFlow I/O
// tuning: compressed shards staged once per node by the launcher, decoded once per node). With
// data.cache on and data.node_cache "on" (or "auto" on a node of more than one rank), local rank 0
// of each node decodes the files (data/dataset.h: load_images, with all the codec's threads) and
// copies them into a block of memory the node's ranks share read-only (dist/node_buffer.h: an MPI-3
// shared window, freed with the job: no cache outlives its job, so none can be stale); every rank
// then reads its samples from it (data/packed_source.h), every epoch, as from its own memory.
//
// Memory: when the decoded block does not fit (its size against the node's MemAvailable of
// /proc/meminfo, read after the decode, and the free space of /dev/shm, where Open MPI keeps
// shared windows), the node falls back to per-rank decoding with a warning naming the node and the
// sizes; so does it, naming the reason, when the MPI library gives no shared window (Open MPI with
// pml monitoring enabled answers MPI_ERR_RMA_FLAVOR). HPCNN_TEST_NODE_MEMORY=BYTES pretends both
// are BYTES (tests of the fall-back).
//
// Collective over each node (every rank calls it with the same arguments, in the same order). A
// decoding error on local rank 0 is thrown on every rank of the node (its kind and message: the
// file and offset), so that no rank waits for a block that never comes.
#pragma once

#include <memory>
#include <string>

#include "data/config.h"
#include "data/source.h"
#include "dist/communicator.h"

namespace hpcnn::measure {

struct NodeCacheUse {
  bool shared = false;            // this node reads the set from its node-shared block
  std::string why;                // for the log: why not (off, one rank, no room ...)
  double decode_cpu_seconds = 0;  // process CPU time (all threads) this rank spent opening the set:
                                  // reading, decoding and (node cache) copying it to the shared block
};

// The samples of `images` (`labels` may be empty) as data::open_configured gives them
// (ErrorKind::usage naming 'data.<what>_images' when empty), decoded once per node as above.
std::shared_ptr<const data::SampleSource> open_node_cached(const std::string& images, const std::string& labels,
                                                           const data::DataConfig& config, dist::Communicator& comm,
                                                           const char* what, NodeCacheUse* use = nullptr);

}  // namespace hpcnn::measure
