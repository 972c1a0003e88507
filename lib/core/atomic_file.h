// hpcnn core: atomic file output.
//
// AtomicFile writes to a temporary file in the target's folder; commit() flushes, fsyncs and
// renames it over the target. A destroyed, uncommitted AtomicFile removes its temporary file,
// and so does SIGINT/SIGTERM (install_signal_cleanup() once in main): a failed or interrupted
// run leaves neither partial output nor temporary files. Errors: ErrorKind::io naming the path.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>

namespace hpcnn {

class AtomicFile {
 public:
  // Creates "<dir>/.<name>.tmp.XXXXXX" next to `target`. Refuses to replace an existing target
  // unless `overwrite` (ErrorKind::io).
  explicit AtomicFile(std::filesystem::path target, bool overwrite = true);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  int fd() const { return fd_; }
  const std::filesystem::path& target() const { return target_; }
  const std::filesystem::path& temp_path() const { return temp_; }
  void write(const void* data, size_t size);
  // fsync + close + rename onto the target + fsync of the folder.
  void commit();
  // Removes the temporary file (idempotent); the target is untouched.
  void abort() noexcept;

 private:
  std::filesystem::path target_;
  std::filesystem::path temp_;
  int fd_ = -1;
  bool committed_ = false;
  int slot_ = -1;
};

// Installs SIGINT/SIGTERM/SIGHUP handlers that unlink every live AtomicFile's temporary file
// and then re-raise the signal with its default action.
void install_signal_cleanup();

// Reads a whole file (ErrorKind::io if it cannot be opened or read).
std::string read_file(const std::filesystem::path& path);

}  // namespace hpcnn
