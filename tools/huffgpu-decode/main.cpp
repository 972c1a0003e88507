// huffgpu-decode: decoder for the huffgpu format (FILE.huf -> FILE), or -t to verify.
#include "core/tool_main.h"
#include "huffman/cli_flags.h"

int main(int argc, char** argv) {
  hpcnn::huffman::FileJobOptions o;
  o.encode = false;
  return hpcnn::run_tool(
      "huffgpu-decode", argc, argv,
      [&](CLI::App& app, int&) {
        app.description("Decompresses huffgpu streams (FILE.huf -> FILE); -t verifies without writing.");
        hpcnn::huffman::add_codec_flags(app, o, false);
        app.add_flag("-t,--test", o.test_only, "Verify the input, write nothing");
        return 0;
      },
      [&](int) { return hpcnn::huffman::run_file_jobs(o); });
}
