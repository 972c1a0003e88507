#include "core/log.h"

#include <spdlog/sinks/stdout_sinks.h>

namespace hpcnn {

void init_logging(const std::string& tool_name, int verbosity) {
  auto logger = spdlog::stderr_logger_mt(tool_name + "-" + std::to_string(verbosity));
  logger->set_pattern(tool_name + ": %l: %v");
  spdlog::level::level_enum level = spdlog::level::info;
  if (verbosity < 0) level = spdlog::level::err;
  if (verbosity == 1) level = spdlog::level::debug;
  if (verbosity >= 2) level = spdlog::level::trace;
  logger->set_level(level);
  spdlog::set_default_logger(logger);
}

}  // namespace hpcnn
