// hpcnn core: logging to stderr through spdlog ("tool: level: message").
// stdout is reserved for data (JSON reports, streams).
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace hpcnn {

// verbosity: -1 quiet (errors only), 0 normal (info), 1 verbose (debug), 2 trace.
void init_logging(const std::string& tool_name, int verbosity = 0);

}  // namespace hpcnn
