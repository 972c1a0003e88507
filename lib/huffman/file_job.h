// hpcnn huffman: the file handling of huffgpu-encode and huffgpu-decode (gzip/zstd habits).
//
// Each input FILE is encoded to FILE.huf (decoded from FILE.huf to FILE) unless -o or -c;
// "-" or no input means stdin to stdout. Outputs are atomic and, as with gzip and zstd, get a
// regular input file's permission bits and modification time (from stdin: 0644 & ~umask, the
// time of writing); existing outputs need -f; inputs are kept unless --rm, which removes an input
// only after its output was verified. Binary output to a terminal is refused. A failure on one
// file is reported (naming the file) and the next file is processed; the exit code is the first
// failure's. Memory follows the data: a small input costs little whatever --chunk-size says.
#pragma once

#include <string>
#include <vector>

#include "huffman/format.h"

namespace hpcnn::huffman {

inline constexpr const char* kExtension = ".huf";

struct FileJobOptions {
  bool encode = true;
  std::vector<std::string> inputs;   // empty: stdin
  std::string output;                // -o
  bool to_stdout = false;            // -c
  bool force = false;                // -f
  bool remove_inputs = false;        // --rm
  bool test_only = false;            // -t (decode)
  bool json = false;                 // --json statistics
  int threads = 0;                   // 0: all cores
  std::string device = "auto";       // auto | cpu | cuda
  size_t gpu_memory_cap = 0;         // bytes of GPU memory the CUDA codec may use (0: no cap)
  FileHeader header;                 // encode settings
};

// Returns the exit code (0 when every file succeeded).
int run_file_jobs(const FileJobOptions& options);

// Threads for -T N (0: all cores).
int resolve_threads(int requested);

}  // namespace hpcnn::huffman
