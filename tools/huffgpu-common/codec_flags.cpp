#include "huffgpu-common/codec_flags.h"

#include "common/numbers.h"

namespace hpcnn::huffgpu {

void add_codec_flags(CLI::App& app, FileJobOptions& o, bool encode_flags) {
  app.add_option("files", o.inputs, "Input files ('-' or none: stdin to stdout)");
  app.add_option("-o,--output", o.output, "Output file (one input only)");
  app.add_flag("-c,--stdout", o.to_stdout, "Write to stdout");
  app.add_flag("-f,--force", o.force, "Overwrite existing output files");
  auto* keep = app.add_flag_callback(
      "-k,--keep", [] {}, "Keep the input files (the default)");
  app.add_flag("--rm", o.remove_inputs, "Remove each input after its output was written and verified")->excludes(keep);
  app.add_option("-T,--threads", o.threads, "Threads (0: all cores)")->check(hpcnn::tool::non_negative_number);
  app.add_option("--device", o.device, "auto | cpu | cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--gpu-memory-cap", o.gpu_memory_cap, "GPU memory the CUDA codec may use, e.g. 2G (default: no cap)")
      ->transform(CLI::AsSizeValue(false));
  app.add_flag("--json", o.json, "Per-file statistics as JSON lines on stdout (stderr when data goes to stdout)");
  if (!encode_flags) return;
  app.add_option("--chunk-size", o.chunk_size, "Bytes per independent chunk, e.g. 4M (default 4M, at most 1G)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--segment-bits", o.segment_bits, "Gap-array segment size S in bits: 128 or 256")
      ->check(CLI::IsMember({128, 256}));
  app.add_flag("--no-gap-array", o.no_gap_array, "Write no gap array (decoding is then sequential within a chunk)");
  app.add_option("--max-code-length", o.max_code_length, "Longest codeword L in bits, 8..16 (default 12)")
      ->check(CLI::Range(8, 16));
  app.add_flag_callback(
      "-d,--decode", [&o] { o.encode = false; }, "Decode instead (as huffgpu-decode)");
}

}  // namespace hpcnn::huffgpu
