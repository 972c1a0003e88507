#include "core/device_error.h"

#include <unistd.h>

#include <mutex>

#include "core/error.h"

namespace hpcnn {

namespace {
std::mutex g_mutex;
int g_rank = -1;
std::string g_host;

std::string local_host() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("unknown host");
}
}  // namespace

void set_process_identity(int rank, const std::string& host) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_rank = rank;
  g_host = host;
}

std::string process_identity() {
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string host = g_host.empty() ? local_host() : g_host;
  return g_rank >= 0 ? "rank " + std::to_string(g_rank) + " on " + host : "host " + host;
}

void throw_device_error(const char* call, const char* file, int line, const std::string& library_message) {
  throw_error(ErrorKind::device, std::string(call) + " failed at " + file + ":" + std::to_string(line) + " (" +
                                     process_identity() + "): " + library_message);
}

}  // namespace hpcnn
