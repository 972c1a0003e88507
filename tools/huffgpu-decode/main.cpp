// huffgpu-decode: decoder for the huffgpu format (FILE.huf -> FILE), or -t to verify.
#include "common/tool.h"
#include "huffgpu-common/codec_flags.h"

int main(int argc, char** argv) {
  hpcnn::huffgpu::FileJobOptions o;
  o.tool = "huffgpu-decode";
  o.encode = false;
  return hpcnn::tool::run_tool(
      {.name = o.tool, .description = "Decompresses huffgpu streams (FILE.huf -> FILE); -t verifies without writing."}, argc,
      argv,
      [&](CLI::App& app) {
        hpcnn::huffgpu::add_codec_flags(app, o, false);
        app.add_flag("-t,--test", o.test_only, "Verify the input, write nothing");
      },
      [&](const hpcnn::tool::Context&) { return hpcnn::huffgpu::run_file_jobs(o); });
}
