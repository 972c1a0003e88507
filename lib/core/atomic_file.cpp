#include "core/atomic_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "core/error.h"

namespace hpcnn {
namespace {

// Temporary paths visible to the signal handler: fixed storage, no allocation in the handler.
constexpr int kSlots = 64;
constexpr size_t kPathMax = 4096;
std::array<std::array<char, kPathMax>, kSlots> g_paths{};
std::array<std::atomic<bool>, kSlots> g_used{};
std::mutex g_slot_mutex;

int register_temp(const std::string& path) {
  if (path.size() >= kPathMax) return -1;
  std::lock_guard<std::mutex> lock(g_slot_mutex);
  for (int i = 0; i < kSlots; ++i) {
    if (!g_used[i].load()) {
      std::memcpy(g_paths[i].data(), path.c_str(), path.size() + 1);
      g_used[i].store(true);
      return i;
    }
  }
  return -1;
}

void unregister_temp(int slot) {
  if (slot >= 0) g_used[slot].store(false);
}

std::atomic<void (*)(int)> g_graceful{nullptr};
std::atomic<int> g_signals{0};

extern "C" void cleanup_handler(int sig) {
  if (void (*graceful)(int) = g_graceful.load(); graceful && g_signals.fetch_add(1) == 0) {
    graceful(sig);
    return;
  }
  for (int i = 0; i < kSlots; ++i)
    if (g_used[i].load()) ::unlink(g_paths[i].data());
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

void create_parent_folders(const std::filesystem::path& target) {
  namespace fs = std::filesystem;
  const fs::path dir = target.parent_path();
  if (dir.empty()) return;
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  // Name the first component that exists but is not a folder, as mkdir -p would.
  fs::path walked;
  for (const auto& part : dir) {
    walked /= part;
    const auto st = fs::status(walked, ec);
    if (fs::exists(st) && !fs::is_directory(st))
      throw_error(ErrorKind::io,
                  "cannot create the folder of '" + target.string() + "': '" + walked.string() + "' exists and is not a folder");
  }
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw_error(ErrorKind::io, "cannot create the folder '" + dir.string() + "' for '" + target.string() +
                                   "': " + (ec ? ec.message() : std::string("not a folder")));
}

void install_signal_cleanup(void (*graceful_stop)(int)) {
  g_graceful.store(graceful_stop);
  struct sigaction sa {};
  sa.sa_handler = cleanup_handler;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

void check_output_target(const std::filesystem::path& target, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(target, ec);
  if (!fs::exists(st)) return;
  if (fs::is_directory(st)) throw_error(ErrorKind::io, "output '" + target.string() + "' is a directory");
  if (!fs::is_regular_file(st))
    throw_error(ErrorKind::io, "output '" + target.string() +
                                   "' is not a regular file (a device or pipe is not replaced; use -c to write to stdout)");
  if (!overwrite) throw_error(ErrorKind::io, "output file '" + target.string() + "' already exists (use -f to overwrite)");
}

AtomicFile::AtomicFile(std::filesystem::path target, bool overwrite) : target_(std::move(target)) {
  namespace fs = std::filesystem;
  check_output_target(target_, overwrite);
  create_parent_folders(target_);
  fs::path dir = target_.parent_path();
  if (dir.empty()) dir = ".";
  std::string templ = (dir / ("." + target_.filename().string() + ".tmp.XXXXXX")).string();
  // The cleanup signals wait while the file is created and registered: a signal in between would
  // otherwise find a temporary file that its handler does not know yet.
  sigset_t cleanup_signals, before;
  sigemptyset(&cleanup_signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&cleanup_signals, sig);
  pthread_sigmask(SIG_BLOCK, &cleanup_signals, &before);
  fd_ = ::mkstemp(templ.data());
  const int err = errno;
  if (fd_ >= 0) slot_ = register_temp(templ);
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (fd_ < 0) {
    errno = err;
    throw_error(ErrorKind::io,
                "cannot create a temporary file in '" + dir.string() + "' for '" + target_.string() + "': " + errno_text());
  }
  temp_ = templ;
  ::fchmod(
      fd_, 0644 & ~[] {
        mode_t m = ::umask(0);
        ::umask(m);
        return m;
      }());
}

AtomicFile::~AtomicFile() {
  if (!committed_) abort();
}

void AtomicFile::write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_error(ErrorKind::io, "cannot write '" + target_.string() + "': " + errno_text());
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::set_mode(mode_t mode) {
  if (::fchmod(fd_, mode & 0777) != 0)
    throw_error(ErrorKind::io, "cannot set the permissions of '" + temp_.string() + "': " + errno_text());
}

void AtomicFile::commit() {
  if (committed_) return;
  if (mtime_) {
    const struct timespec times[2] = {{0, UTIME_OMIT}, *mtime_};  // access time: unchanged
    if (::futimens(fd_, times) != 0)
      throw_error(ErrorKind::io, "cannot set the modification time of '" + temp_.string() + "': " + errno_text());
  }
  if (::fsync(fd_) != 0) throw_error(ErrorKind::io, "cannot flush '" + target_.string() + "': " + errno_text());
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw_error(ErrorKind::io, "cannot close '" + target_.string() + "': " + errno_text());
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), target_.c_str()) != 0)
    throw_error(ErrorKind::io, "cannot rename '" + temp_.string() + "' to '" + target_.string() + "': " + errno_text());
  committed_ = true;
  unregister_temp(slot_);
  slot_ = -1;
  std::filesystem::path dir = target_.parent_path();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void AtomicFile::abort() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_.empty() && !committed_) ::unlink(temp_.c_str());
  unregister_temp(slot_);
  slot_ = -1;
}

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw_error(ErrorKind::io, "'" + path.string() + "' is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorKind::io, "cannot open '" + path.string() + "': " + errno_text());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw_error(ErrorKind::io, "cannot read '" + path.string() + "'");
  return ss.str();
}

}  // namespace hpcnn
