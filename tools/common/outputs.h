// hpcnn tools: the one output-path policy of every tool, checked before any work.
//
//   - A missing parent folder is created (as mkdir -p does); a path component that exists but
//     is not a folder is ErrorKind::io naming it.
//   - A directory, device or pipe is never replaced (ErrorKind::io; write to a pipe with -c).
//   - An existing file needs -f (ErrorKind::io "use -f"), except the outputs a tool declares as
//     rewritten while it runs (dist-train's checkpoint and metrics), which it replaces or extends.
//   - An output that is one of the tool's inputs, or the same path as another of its outputs, is
//     ErrorKind::usage (same file by inode, or the same path once normalised).
// Writing itself is atomic (core/atomic_file.h: temporary file, fsync, rename; removed on
// failure and on SIGINT/SIGTERM).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/atomic_file.h"

namespace hpcnn::tool {

struct Output {
  std::filesystem::path path;
  std::string what;                   // "output model", "--report": names it in errors
  bool rewritten_as_it_runs = false;  // replaced/extended while the tool runs: no -f needed
};

// Applies the policy to every output (empty paths are skipped). `inputs`: the files the tool
// reads (an output may not be one of them).
void prepare_outputs(const std::vector<Output>& outputs, const std::vector<std::filesystem::path>& inputs, bool force);

// A JSON report that goes to stdout, or to a file (--report) opened when constructed, before the
// tool's work, so that a report path that cannot be written fails before any other output is
// made; write() prints or commits the text (atomically).
class Report {
 public:
  explicit Report(const std::string& path);
  void write(const std::string& text);

 private:
  std::unique_ptr<AtomicFile> file_;
};

// Whether two paths name the same file: same inode when both exist, else the same normalised path.
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

}  // namespace hpcnn::tool
