// huffgpu-encode / huffgpu-decode: the command-line flags the two codec tools share.
#pragma once

#include <CLI/CLI.hpp>

#include "huffgpu-common/file_job.h"

namespace hpcnn::huffgpu {

// Adds the I/O flags both tools take (FILE..., -o, -c, -f, -k, --rm, -T, --device, --json);
// with `encode_flags` also --chunk-size, --segment-bits, --no-gap-array, --max-code-length, -d.
// The values land in `o`, which must outlive the parse.
void add_codec_flags(CLI::App& app, FileJobOptions& o, bool encode_flags);

}  // namespace hpcnn::huffgpu
