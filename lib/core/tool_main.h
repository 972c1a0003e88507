// hpcnn core: the common frame of every tool's main().
//
// run_tool() installs the signal cleanup for atomic outputs, runs the body and maps errors to
// exit codes: CLI11 parse errors -> 1 (usage), hpcnn::Error -> its kind, std::bad_alloc and
// other exceptions -> 3. Messages go to stderr as "tool: error: ...". Never exits 0 after an error.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace hpcnn {

// The version string printed by every tool's --version ("hpcnn 0.1.0").
std::string version_string();

// Adds --version (prints "<tool> (hpcnn X.Y.Z)" and exits 0) and -q/-v to `app`.
void add_common_flags(CLI::App& app, int& verbosity);

int run_tool(const std::string& tool_name, int argc, char** argv,
             const std::function<int(CLI::App&, int&)>& setup,
             const std::function<int(int verbosity)>& body);

}  // namespace hpcnn
