// dist-train: data-parallel training of ONNX CNNs, launched by mpirun (MPI on CPUs) or run as a
// single process. See configs/README.md for the configuration keys.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <iostream>

#include "core/error.h"
#include "core/log.h"
#include "core/tool_main.h"
#include "dist/communicator.h"
#include "train/config.h"
#include "train/trainer.h"

namespace {

std::atomic<int> g_signals{0};  // lock-free: safe in a signal handler
static_assert(std::atomic<int>::is_always_lock_free);

void on_signal(int sig) {
  if (g_signals.fetch_add(1) == 0) {
    hpcnn::train::request_stop();  // checkpoint at the next step, then exit 143
    return;
  }
  std::signal(sig, SIG_DFL);  // a second signal: stop now
  std::raise(sig);
}

void init_rank_logging(int rank, int verbosity) {
  hpcnn::init_logging("dist-train", verbosity);
  if (rank != 0) {  // other ranks: warnings and errors only, prefixed with their rank
    auto logger = spdlog::default_logger();
    logger->set_pattern("dist-train[rank " + std::to_string(rank) + "]: %l: %v");
    logger->set_level(std::max(logger->level(), spdlog::level::warn));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<hpcnn::dist::Communicator> comm;
  try {
    comm = hpcnn::dist::make_communicator(&argc, &argv);
  } catch (const hpcnn::Error& e) {
    std::cerr << "dist-train: error: " << e.what() << "\n";
    return e.exit_code();
  }
  const int rank = comm->rank(), world = comm->size();
  // An error on any rank ends every rank (MPI_Abort), naming the rank.
  auto fail = [&](int code, const std::string& msg) -> int {
    std::cerr << "dist-train: error" << (world > 1 ? " (rank " + std::to_string(rank) + ")" : std::string()) << ": " << msg << "\n";
    if (world > 1) comm->abort(code);
    return code;
  };

  CLI::App app;
  app.name("dist-train");
  app.description(
      "Data-parallel training of an ONNX CNN: launch with `mpirun -np N dist-train --config FILE`\n"
      "(MPI on CPUs) or run it as one process. Flags override configuration keys; logs go to stderr\n"
      "(rank 0; other ranks only warnings and errors), the final summary as JSON to stdout.");
  int verbosity = 0;
  std::string config, resume, evaluate, model, output, metrics, checkpoint;
  int epochs = 0, batch = 0, threads = -1;
  double lr = 0;
  bool print_config = false;
  std::vector<std::string> sets;
  hpcnn::add_common_flags(app, verbosity);
  app.add_option("--config", config, "JSON configuration (configs/README.md documents every key)");
  app.add_option("--model", model, "Override 'model': the ONNX model to train");
  app.add_option("-o,--output", output, "Override 'output': where to write the trained ONNX model");
  app.add_option("--epochs", epochs, "Override 'epochs'")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch, "Override 'batch_size' (per rank)")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "Override 'lr.base'")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "Override 'threads' (per rank; 0 = cores / ranks on the node)")->check(CLI::NonNegativeNumber);
  app.add_option("--metrics", metrics, "Override 'metrics': JSON lines, one per epoch");
  app.add_option("--checkpoint", checkpoint, "Override 'checkpoint.path'");
  app.add_option("--set", sets, "Override any key: --set optimizer.type=lars (repeatable; value as JSON or a string)");
  app.add_flag("--print-config", print_config, "Print the merged configuration as JSON and exit");
  app.add_option("--resume", resume, "Resume from this checkpoint (also with another number of ranks)");
  app.add_option("--evaluate", evaluate, "Report the test accuracy and loss of this ONNX model, without training");
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    if (rank == 0) app.exit(e);
    return 0;
  } catch (const CLI::ParseError& e) {
    if (rank == 0) std::cerr << "dist-train: error: " << e.what() << "\nRun with --help for more information.\n";
    return static_cast<int>(hpcnn::ErrorKind::usage);
  }
  init_rank_logging(rank, verbosity);

  try {
    std::vector<std::pair<std::string, std::string>> overrides;
    auto str = [](const std::string& s) { return nlohmann::json(s).dump(); };
    if (!model.empty()) overrides.emplace_back("model", str(model));
    if (!output.empty()) overrides.emplace_back("output", str(output));
    if (!metrics.empty()) overrides.emplace_back("metrics", str(metrics));
    if (!checkpoint.empty()) overrides.emplace_back("checkpoint.path", str(checkpoint));
    if (epochs > 0) overrides.emplace_back("epochs", std::to_string(epochs));
    if (batch > 0) overrides.emplace_back("batch_size", std::to_string(batch));
    if (lr > 0) overrides.emplace_back("lr.base", nlohmann::json(lr).dump());
    if (threads >= 0) overrides.emplace_back("threads", std::to_string(threads));
    for (const auto& s : sets) {
      const auto eq = s.find('=');
      if (eq == std::string::npos || eq == 0)
        hpcnn::throw_error(hpcnn::ErrorKind::usage, "--set '" + s + "': expected KEY=VALUE");
      overrides.emplace_back(s.substr(0, eq), s.substr(eq + 1));
    }
    if (!evaluate.empty() && model.empty()) overrides.emplace_back("model", str(evaluate));
    const hpcnn::train::TrainConfig cfg = hpcnn::train::load_config(config, overrides);
    if (rank == 0)
      for (const auto& w : cfg.warnings) spdlog::warn("{}", w);
    if (print_config) {
      if (rank == 0) std::cout << cfg.merged.dump(2) << std::endl;
      return 0;
    }
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    nlohmann::json result;
    if (!evaluate.empty()) {
      result = hpcnn::train::run_evaluation(cfg, *comm, evaluate);
    } else {
      hpcnn::train::RunOptions ro;
      ro.resume = resume;
      ro.progress = rank == 0 && verbosity >= 0 && isatty(STDERR_FILENO);
      result = hpcnn::train::run_training(cfg, *comm, ro);
    }
    if (rank == 0) std::cout << result.dump() << std::endl;
    if (result.value("stopped", false)) return hpcnn::train::kStoppedExitCode;
    return 0;
  } catch (const hpcnn::Error& e) {
    return fail(e.exit_code(), e.what());
  } catch (const std::bad_alloc&) {
    return fail(static_cast<int>(hpcnn::ErrorKind::io), "out of memory");
  } catch (const std::exception& e) {
    return fail(static_cast<int>(hpcnn::ErrorKind::io), e.what());
  }
}
