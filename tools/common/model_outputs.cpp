#include "common/model_outputs.h"

#include <iostream>

#include "common/tool.h"
#include "core/error.h"

namespace hpcnn::tool {

onnxu::ExternalData ModelOutputFlags::external_data() const {
  return external == "always"  ? onnxu::ExternalData::always
         : external == "never" ? onnxu::ExternalData::never
                               : onnxu::ExternalData::automatic;
}

void add_model_output_flags(CLI::App& app, ModelOutputFlags& flags) {
  app.add_option("--report", flags.report, "Write the JSON report to this file instead of stdout");
  app.add_option("--external-data", flags.external,
                 "Store the weights in '<output>.data': auto (when the input did, or over 2 GiB), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  app.add_flag("-f,--force", flags.force, "Overwrite existing output files");
}

std::unique_ptr<dist::Communicator> tool_communicator(const char* tool, int* argc, char*** argv, int* exit_code) {
  try {
    return asks_only_for_help_or_version(*argc, *argv) ? dist::make_single_communicator() : dist::make_communicator(argc, argv);
  } catch (const Error& e) {
    std::cerr << tool << ": error: " << e.what() << "\n";
    *exit_code = e.exit_code();
    return nullptr;
  }
}

ToolSpec mpi_tool_spec(std::string name, std::string description, dist::Communicator& comm) {
  return {.name = std::move(name),
          .description = std::move(description),
          .rank = comm.rank(),
          .world = comm.size(),
          .on_failure = [&comm](int code) {
            if (comm.size() > 1) comm.abort(code);
          }};
}

}  // namespace hpcnn::tool
