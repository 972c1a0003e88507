#include "measure/node_cache.h"

#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <time.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "data/dataset.h"
#include "data/packed_source.h"
#include "dist/node_buffer.h"

namespace hpcnn::measure {

namespace {

constexpr const char* kShmDir = "/dev/shm";  // Open MPI's osc_sm_backing_directory on Linux

std::string mib(uint64_t bytes) {
  std::ostringstream s;
  s.precision(1);
  s << std::fixed << static_cast<double>(bytes) / (1024.0 * 1024.0) << " MiB";
  return s.str();
}

// MemAvailable of /proc/meminfo in bytes (0 when it cannot be read).
uint64_t mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (f >> key >> kib) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

uint64_t shm_free() {
  struct statvfs s {};
  if (::statvfs(kShmDir, &s) != 0) return 0;
  return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
}

// "" when `need` bytes fit in the node's memory and shared-memory file system, else why not.
std::string no_room(uint64_t need) {
  uint64_t avail = mem_available(), shm = shm_free();
  if (const char* t = std::getenv("HPCNN_TEST_NODE_MEMORY")) avail = shm = std::strtoull(t, nullptr, 10);
  if (need <= avail && need <= shm) return "";
  return "the decoded data (" + mib(need) + ") " + (need > avail ? "exceed" : "fit") + " the node's MemAvailable (" + mib(avail) +
         ") and " + (need > shm ? "exceed" : "fit") + " the free space of " + kShmDir + " (" + mib(shm) + ")";
}

double cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// What local rank 0 tells the node's other ranks after decoding.
struct Header {
  int32_t status = 0;  // 0 shared, 1 fall back to per-rank decoding, 2 decoding failed
  int32_t kind = 0;    // ErrorKind when status 2
  data::PackedLayout layout;
  uint64_t text = 0;  // bytes of the text that follows: the origin (0), the reason (1) or the error (2)
};

}  // namespace

std::shared_ptr<const data::SampleSource> open_node_cached(const std::string& images, const std::string& labels,
                                                           const data::DataConfig& config, dist::Communicator& comm,
                                                           const char* what, NodeCacheUse* use) {
  NodeCacheUse u;
  const double cpu0 = cpu_seconds();
  if (!config.cache)
    u.why = "data.cache is false";
  else if (config.node_cache == "off")
    u.why = "data.node_cache is off";
  else if (config.node_cache == "auto" && comm.local_size() < 2)
    u.why = "data.node_cache auto and one rank on the node";
  if (!u.why.empty() || images.empty()) {
    auto source = data::open_configured(images, labels, config.cache, what);
    u.decode_cpu_seconds = cpu_seconds() - cpu0;
    if (use) *use = u;
    return source;
  }
  const bool leader = comm.local_rank() == 0;
  const std::string node = comm.host();
  Header h;
  std::string text;
  data::ImageSet set;
  if (leader) {
    try {
      set = data::load_images(images, labels);
      h.layout = data::packed_layout(set);
      text = no_room(h.layout.bytes());
      h.status = text.empty() ? 0 : 1;
      if (text.empty()) text = set.origin;
    } catch (const Error& e) {
      h.status = 2;
      h.kind = static_cast<int32_t>(e.kind());
      text = e.what();
    }
    h.text = text.size();
  }
  comm.node_broadcast(&h, sizeof h);
  text.resize(h.text);
  comm.node_broadcast(text.data(), text.size());
  if (h.status == 2)
    throw_error(static_cast<ErrorKind>(h.kind), leader ? text : text + "\n(decoded for node " + node + " by its local rank 0)");
  std::shared_ptr<const data::SampleSource> source;
  if (h.status == 0) {
    const data::PackedLayout layout = h.layout;
    std::string unavailable;
    std::shared_ptr<const dist::NodeBuffer> block = comm.node_shared(
        layout.bytes(), [&](void* dst) { data::pack_images(set, layout, dst); }, &unavailable);
    if (block) {
      set = data::ImageSet{};  // the node's one copy is the shared block now
      source = std::make_shared<data::PackedSource>(layout, block->data(), block, text);
      u.shared = true;
      if (leader)
        spdlog::info("{} data: {} samples from {}, decoded once on {} into {} of node-shared memory for its {} ranks", what,
                     source->size(), source->origin(), node, mib(layout.bytes()), comm.local_size());
    } else {
      h.status = 1;  // the same on every rank of the node: the window failed alike on each
      text = unavailable;
    }
  }
  if (h.status == 1) {  // per-rank: local rank 0 keeps what it decoded, the others decode their own
    u.why = text;
    if (leader) {
      spdlog::warn("{} data: node cache off on {}: {}; each of its {} ranks decodes its own copy", what, node, text,
                   comm.local_size());
      source = std::make_shared<data::InMemorySource>(std::move(set));
      spdlog::info("{} data: {} samples from {}", what, source->size(), source->origin());
    } else {
      source = data::open_configured(images, labels, config.cache, what);
    }
  }
  u.decode_cpu_seconds = cpu_seconds() - cpu0;
  if (use) *use = u;
  return source;
}

}  // namespace hpcnn::measure
