// hpcnn tools: the frame of every tool's main() (tools/<tool>/main.cpp stays a thin driver).
//
// run_tool() parses the flags (CLI11) with the ones every tool has (--help, --version, -q, -v),
// sets up logging on stderr ("tool: level: message"; under mpirun other ranks than 0 log only
// warnings and errors, tagged "[rank R]"), installs the signal handling of atomic outputs
// (SIGINT/SIGTERM/SIGHUP remove temporary files, then end the process; or a graceful first stop,
// see ToolSpec), runs the body and maps failures to the exit codes of core/error.h:
//   CLI11 parse errors and ErrorKind::usage -> 1, bad input -> 2, I/O -> 3, unsupported -> 4,
//   device/communication -> 5, std::bad_alloc and other exceptions -> 3.
// A positional argument that starts with '-' and comes before "--" is an unknown option (CLI11
// would take "-10.txt" as a negative number): one rule for every leading dash.
// Errors are printed once as "tool: error: ..." ("tool: error (rank R): ..." under mpirun).
// Never exits 0 after an error.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace hpcnn::tool {

// The version line of every tool's --version: "<tool> (hpcnn X.Y.Z)".
std::string version_string();

struct ToolSpec {
  std::string name;         // "prune-rate"
  std::string description;  // --help text
  int rank = 0, world = 1;  // under mpirun: this process's rank and the world size
  // Called with the exit code after an error was printed, before main returns it (dist-train:
  // MPI_Abort, so that every rank stops).
  std::function<void(int exit_code)> on_failure;
  // Async-signal-safe: the first SIGINT/SIGTERM/SIGHUP calls it (with the signal number) and the
  // tool stops at a point of its choosing; a second signal cleans up and ends the process. Null:
  // the first signal does.
  void (*graceful_stop)(int signal) = nullptr;
};

struct Context {
  int verbosity = 0;      // -1 quiet, 0 normal, 1+ verbose (-v, -vv)
  bool progress = false;  // stderr is a terminal, not quiet, rank 0: progress bars may be drawn
};

// True when the command line asks only for --help / -h / --version: the tools that start MPI
// skip it then, so that `dist-train --version` answers on a login node or in a job step whose
// launcher the MPI library does not support (the cluster environment check runs it so).
bool asks_only_for_help_or_version(int argc, char** argv);

// setup adds the tool's flags to `app`; body does the work and returns the exit code.
int run_tool(const ToolSpec& spec, int argc, char** argv, const std::function<void(CLI::App&)>& setup,
             const std::function<int(const Context&)>& body);

}  // namespace hpcnn::tool
