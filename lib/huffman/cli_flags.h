// hpcnn huffman: the command-line flags shared by huffgpu-encode and huffgpu-decode.
#pragma once

#include <CLI/CLI.hpp>

#include "huffman/file_job.h"

namespace hpcnn::huffman {

// Adds the I/O flags both tools take (FILE..., -o, -c, -f, -k, --rm, -T, --device, --json);
// with `encode_flags` also --chunk-size, --segment-bits, --no-gap-array, --max-code-length, -d.
void add_codec_flags(CLI::App& app, FileJobOptions& o, bool encode_flags);

}  // namespace hpcnn::huffman
