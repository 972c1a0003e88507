#include "core/tool_main.h"

#include <cstdio>
#include <iostream>
#include <new>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/version.h"

namespace hpcnn {

std::string version_string() { return std::string("hpcnn ") + kVersion; }

void add_common_flags(CLI::App& app, int& verbosity) {
  app.set_version_flag("--version", [name = app.get_name()] { return name + " (" + version_string() + ")"; });
  app.add_flag_callback("-q,--quiet", [&verbosity] { verbosity = -1; }, "Only print errors");
  app.add_flag_callback("-v,--verbose", [&verbosity] { verbosity += 1; }, "More log output (repeatable)");
}

int run_tool(const std::string& tool_name, int argc, char** argv,
             const std::function<int(CLI::App&, int&)>& setup,
             const std::function<int(int verbosity)>& body) {
  install_signal_cleanup();
  CLI::App app;
  app.name(tool_name);
  int verbosity = 0;
  try {
    add_common_flags(app, verbosity);
    setup(app, verbosity);
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      std::cerr << tool_name << ": error: " << e.what() << "\n"
                << "Run with --help for more information.\n";
      return static_cast<int>(ErrorKind::usage);
    }
    init_logging(tool_name, verbosity);
    return body(verbosity);
  } catch (const Error& e) {
    std::cerr << tool_name << ": error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::cerr << tool_name << ": error: out of memory\n";
    return static_cast<int>(ErrorKind::io);
  } catch (const std::exception& e) {
    std::cerr << tool_name << ": error: " << e.what() << "\n";
    return static_cast<int>(ErrorKind::io);
  }
}

}  // namespace hpcnn
