// huffgpu-encode / huffgpu-decode: the file handling of the two codec tools (gzip/zstd habits),
// over the library's stream codec (huffman/stream.h, huffman/codec.h).
//
// Each input FILE is encoded to FILE.huf (decoded from FILE.huf to FILE) unless -o or -c;
// "-" or no input means stdin to stdout. Outputs follow the tool frame's output policy
// (common/outputs.h: -f to replace, never a directory, device or pipe, never the input, missing
// folders created; an output that is another input of the command refuses the whole command,
// ErrorKind::usage, before any file is processed), are atomic and, as with gzip and zstd, get a regular input file's permission
// bits and modification time (from stdin: 0644 & ~umask, the time of writing); inputs are kept
// unless --rm, which removes an input only after its output was verified. Binary output to a
// terminal is refused. A failure on one file is reported (naming the file) and the next file is
// processed; the exit code is the first failure's. Memory follows the data: a small input costs
// little whatever --chunk-size says.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "huffman/format.h"

namespace hpcnn::huffgpu {

inline constexpr const char* kExtension = ".huf";

struct FileJobOptions {
  std::string tool;  // "huffgpu-encode": names the tool in per-file errors
  bool encode = true;
  std::vector<std::string> inputs;  // empty: stdin
  std::string output;               // -o
  bool to_stdout = false;           // -c
  bool force = false;               // -f
  bool remove_inputs = false;       // --rm
  bool test_only = false;           // -t (decode)
  bool json = false;                // --json statistics
  int threads = 0;                  // -T; 0: core/threads.h's rule
  std::string device = "auto";      // auto | cpu | cuda
  size_t gpu_memory_cap = 0;        // bytes of GPU memory the CUDA codec may use (0: no cap)
  // encode settings, as given on the command line (checked by run_file_jobs)
  uint64_t chunk_size = 4u << 20;
  int segment_bits = 256;
  int max_code_length = 12;
  bool no_gap_array = false;
};

// Returns the exit code (0 when every file succeeded).
int run_file_jobs(const FileJobOptions& options);

}  // namespace hpcnn::huffgpu
