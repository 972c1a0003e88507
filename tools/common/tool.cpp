#include "common/tool.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <iostream>
#include <map>
#include <new>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/version.h"

namespace hpcnn::tool {

std::string version_string() { return std::string("hpcnn ") + kVersion; }

namespace {

void init_rank_logging(const ToolSpec& spec, int verbosity) {
  init_logging(spec.name, verbosity);
  if (spec.rank != 0) {
    auto logger = spdlog::default_logger();
    logger->set_pattern(spec.name + "[rank " + std::to_string(spec.rank) + "]: %l: %v");
    logger->set_level(std::max(logger->level(), spdlog::level::warn));
  }
}

// One rule for a leading dash: an argument that starts with '-' is an option unless it comes
// after "--". CLI11 lets "-<digit>..." through as a positional value (for negative numbers), so
// that `huffgpu-encode -10.txt` would read a file while `-x.txt` is an unknown option: such a
// positional value given before "--" is refused as an unknown option instead.
void refuse_dash_positionals(const CLI::App& app, int argc, char** argv) {
  std::map<std::string, int> before;  // "-<digit>..." arguments before "--", counted
  std::map<std::string, int> after;
  bool separated = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (!separated && a == "--") {
      separated = true;
      continue;
    }
    if (a.size() > 1 && a[0] == '-' && std::isdigit(static_cast<unsigned char>(a[1]))) ++(separated ? after : before)[a];
  }
  if (before.empty()) return;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->nonpositional()) continue;
    std::map<std::string, int> seen;
    for (const std::string& v : opt->results())
      if (auto it = before.find(v); it != before.end() && ++seen[v] > after[v])
        throw CLI::ExtrasError(
            "unknown option '" + v + "' (a file whose name starts with '-' goes after '--', or as ./" + v + ")",
            CLI::ExitCodes::ExtrasError);
  }
}

}  // namespace

bool asks_only_for_help_or_version(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h" || a == "--version") return true;
  }
  return false;
}

// What a failed allocation says: the peak resident memory so far and the limit that may have
// stopped it (getrusage, getrlimit), so that a user can tell a too small job from a bug.
namespace {
std::string out_of_memory_message() {
  std::string m = "out of memory: an allocation failed";
  rusage use{};
  if (::getrusage(RUSAGE_SELF, &use) == 0) m += " at a peak resident set of " + std::to_string(use.ru_maxrss / 1024) + " MiB";
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    m += " under a virtual memory limit of " + std::to_string(as.rlim_cur >> 20) + " MiB (ulimit -v)";
  return m + " (a node's memory, a ulimit or a cgroup limit; no partial output is left)";
}
}  // namespace

int run_tool(const ToolSpec& spec, int argc, char** argv, const std::function<void(CLI::App&)>& setup,
             const std::function<int(const Context&)>& body) {
  install_signal_cleanup(spec.graceful_stop);
  const std::string who =
      spec.world > 1 ? spec.name + ": error (rank " + std::to_string(spec.rank) + "): " : spec.name + ": error: ";
  auto fail = [&](int code, const std::string& message) {
    std::cerr << who << message << "\n";
    if (spec.on_failure) spec.on_failure(code);
    return code;
  };
  CLI::App app;
  app.name(spec.name);
  app.description(spec.description);
  Context ctx;
  try {
    app.set_version_flag("--version", [name = spec.name] { return name + " (" + version_string() + ")"; });
    app.add_flag_callback(
        "-q,--quiet", [&ctx] { ctx.verbosity = -1; }, "Only print errors");
    app.add_flag_callback(
        "-v,--verbose", [&ctx] { ctx.verbosity += 1; }, "More log output (repeatable)");
    setup(app);
    try {
      app.parse(argc, argv);
      refuse_dash_positionals(app, argc, argv);
    } catch (const CLI::Success& e) {  // --help, --version: printed once
      return spec.rank == 0 ? app.exit(e) : 0;
    } catch (const CLI::ParseError& e) {
      if (spec.rank == 0) std::cerr << spec.name << ": error: " << e.what() << "\nRun with --help for more information.\n";
      return static_cast<int>(ErrorKind::usage);
    }
    init_rank_logging(spec, ctx.verbosity);
    ctx.progress = spec.rank == 0 && ctx.verbosity >= 0 && ::isatty(STDERR_FILENO);
    return body(ctx);
  } catch (const Error& e) {
    return fail(e.exit_code(), e.what());
  } catch (const std::bad_alloc&) {
    return fail(static_cast<int>(ErrorKind::io), out_of_memory_message());
  } catch (const std::exception& e) {
    return fail(static_cast<int>(ErrorKind::io), e.what());
  }
}

}  // namespace hpcnn::tool
