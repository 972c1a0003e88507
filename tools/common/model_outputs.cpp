#include "common/model_outputs.h"

#include <cstdlib>
#include <iostream>

#include "common/tool.h"
#include "core/error.h"
#include "onnx/shapes.h"

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

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var)) return true;
  return false;
}

std::unique_ptr<dist::Communicator> tool_communicator(const char* tool, int* argc, char*** argv, int* exit_code, bool wants_mpi) {
  try {
    if (!wants_mpi || asks_only_for_help_or_version(*argc, *argv)) return dist::make_single_communicator();
    auto comm = dist::make_communicator(argc, argv);
    // No fork() after MPI_Init: ONNX shape inference runs in this process from here on.
    if (comm->backend() == "mpi") onnxu::set_shape_inference_isolation(false);
    return comm;
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
