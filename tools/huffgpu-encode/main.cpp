// huffgpu-encode: lossless Huffman encoder with gap arrays (Yamamoto, Nakano et al., ICPP 2020).
#include "core/tool_main.h"
#include "huffman/cli_flags.h"

int main(int argc, char** argv) {
  hpcnn::huffman::FileJobOptions o;
  return hpcnn::run_tool(
      "huffgpu-encode", argc, argv,
      [&](CLI::App& app, int&) {
        app.description("Compresses files with canonical Huffman codes and gap arrays (huffgpu format, FILE -> FILE.huf).");
        hpcnn::huffman::add_codec_flags(app, o, true);
        return 0;
      },
      [&](int) { return hpcnn::huffman::run_file_jobs(o); });
}
