// huffgpu-encode: lossless Huffman encoder with gap arrays (Yamamoto, Nakano et al., ICPP 2020).
#include "common/tool.h"
#include "huffgpu-common/codec_flags.h"

int main(int argc, char** argv) {
  hpcnn::huffgpu::FileJobOptions o;
  o.tool = "huffgpu-encode";
  return hpcnn::tool::run_tool(
      {.name = o.tool,
       .description = "Compresses files with canonical Huffman codes and gap arrays (huffgpu format, FILE -> FILE.huf)."},
      argc, argv, [&](CLI::App& app) { hpcnn::huffgpu::add_codec_flags(app, o, true); },
      [&](const hpcnn::tool::Context&) { return hpcnn::huffgpu::run_file_jobs(o); });
}
