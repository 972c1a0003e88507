// hpcnn tools: the flags of every tool that writes an ONNX model and a JSON report (prune-rate,
// sparsify-fcl, bn-polish), in one place:
//   --report FILE                          the JSON report to FILE instead of stdout
//   --external-data auto|always|never      weights in '<output>.data': auto = when the input had
//                                          external data or the model would exceed 2 GiB
//   -f, --force                            overwrite existing output files
// and the process world of the tools that may run under mpirun (dist-train, bn-polish).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "common/tool.h"
#include "dist/communicator.h"
#include "onnx/model.h"

namespace hpcnn::tool {

struct ModelOutputFlags {
  std::string report;
  std::string external = "auto";
  bool force = false;
  onnxu::ExternalData external_data() const;
};

void add_model_output_flags(CLI::App& app, ModelOutputFlags& flags);

// MPI when launched for real, a world of one for --help/--version (so that they answer where the
// MPI library cannot start, e.g. a login node or an unsupported launcher) and when `wants_mpi` is
// false (prune-rate without training data, outside a launcher: a plain process). Once MPI is
// initialised, ONNX shape inference stops forking (onnx/shapes.h: no fork() after MPI_Init). On
// failure prints "<tool>: error: ..." and returns null; the caller exits with the error's code
// (*exit_code).
std::unique_ptr<dist::Communicator> tool_communicator(const char* tool, int* argc, char*** argv, int* exit_code,
                                                      bool wants_mpi = true);

// True in a process started by an MPI launcher (Open MPI, MPICH/PMI, PMIx environment variables).
bool launched_by_mpi();

// The ToolSpec of a tool that may run under mpirun: its rank and world size, and an error on any
// rank ends every rank (MPI_Abort with the exit code). `comm` must outlive run_tool().
ToolSpec mpi_tool_spec(std::string name, std::string description, dist::Communicator& comm);

}  // namespace hpcnn::tool
