// hpcnn huffman: the per-chunk codec a stream runs with (stream.h): the multi-threaded CPU codec
// (cpu/) or the CUDA codec (cuda/, Yamamoto, Nakano et al., ICPP 2020), which write the same bytes.
#pragma once

#include <cstddef>
#include <string>

#include "huffman/stream.h"

namespace hpcnn::huffman {

enum class DeviceChoice {
  automatic,  // the CUDA codec when this build has it and a device is present, else the CPU
  cpu,
  cuda,  // the CUDA codec or ErrorKind::device (exit code 5) saying what is missing
};

struct SelectedCodec {
  ChunkCodec codec;
  std::string device;  // "cpu" or "cuda"
  std::string why;     // automatic fell back to the CPU: why (no CUDA in this build, no device, ...)
};

// `threads` for the CPU codec (>= 1); `gpu_memory_cap` bytes the CUDA codec may use (0: no cap).
SelectedCodec select_codec(DeviceChoice choice, int threads, size_t gpu_memory_cap);

}  // namespace hpcnn::huffman
