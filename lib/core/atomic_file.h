// hpcnn core: atomic file output.
//
// AtomicFile writes to a temporary file in the target's folder; commit() flushes, fsyncs and
// renames it over the target. A destroyed, uncommitted AtomicFile removes its temporary file,
// and so does SIGINT/SIGTERM (install_signal_cleanup() once in main): a failed or interrupted
// run leaves neither partial output nor temporary files. Errors: ErrorKind::io naming the path.
//
// Output folders (one rule for every tool): missing parent folders of an output are created
// (as `mkdir -p` would, mode 0777 & ~umask); a parent that exists but is not a folder is an
// ErrorKind::io error naming it. Tools call create_parent_folders() for their outputs before
// any work, so a bad output path fails in seconds, not after hours of training.
#pragma once

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

namespace hpcnn {

// Creates the missing parent folders of `target` (nothing when it has none). ErrorKind::io
// naming the folder when one cannot be created or a path component is not a folder.
void create_parent_folders(const std::filesystem::path& target);

// Whether `target` may be (re)placed by an output file: ErrorKind::io when it is a directory,
// a device or pipe (never replaced), or exists while !overwrite ("use -f").
void check_output_target(const std::filesystem::path& target, bool overwrite);

class AtomicFile {
 public:
  // Creates "<dir>/.<name>.tmp.XXXXXX" next to `target` (and the missing folders of <dir>,
  // see create_parent_folders). Refuses to replace an existing target
  // unless `overwrite` (ErrorKind::io).
  explicit AtomicFile(std::filesystem::path target, bool overwrite = true);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  int fd() const { return fd_; }
  const std::filesystem::path& target() const { return target_; }
  const std::filesystem::path& temp_path() const { return temp_; }
  void write(const void* data, size_t size);
  // The output's permission bits (mode & 0777), set on the temporary file at once, so that data
  // written after the call is never more exposed than `mode` allows. Without a call the file gets
  // 0644 & ~umask. Tools pass their input's bits (gzip and zstd keep them). ErrorKind::io.
  void set_mode(mode_t mode);
  // The output's modification time, set by commit() after the last write and before the rename
  // (without a call: the time of the last write). Tools pass their input's st_mtim.
  void set_mtime(const struct timespec& mtime) { mtime_ = mtime; }
  // [set the modification time] + fsync + close + rename onto the target + fsync of the folder.
  void commit();
  // Removes the temporary file (idempotent); the target is untouched.
  void abort() noexcept;

 private:
  std::filesystem::path target_;
  std::filesystem::path temp_;
  int fd_ = -1;
  std::optional<struct timespec> mtime_;
  bool committed_ = false;
  int slot_ = -1;
};

// Installs SIGINT/SIGTERM/SIGHUP handlers that unlink every live AtomicFile's temporary file
// and then re-raise the signal with its default action. With `graceful_stop` (async-signal-safe,
// e.g. setting an atomic flag; called with the signal number), the first signal calls it instead
// and the program goes on to stop at a point of its choosing (dist-train: a checkpoint at the next
// step); a second signal cleans up and ends the process as above.
void install_signal_cleanup(void (*graceful_stop)(int signal) = nullptr);

// Reads a whole file (ErrorKind::io if it cannot be opened or read).
std::string read_file(const std::filesystem::path& path);

}  // namespace hpcnn
