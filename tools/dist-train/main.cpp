// dist-train: data-parallel training of ONNX CNNs, launched by mpirun (MPI on CPUs) or run as a
// single process. See configs/README.md for the configuration keys.
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "common/allocator.h"
#include "common/model_outputs.h"
#include "common/numbers.h"
#include "common/outputs.h"
#include "common/progress.h"
#include "common/tool.h"
#include "core/device_error.h"
#include "core/error.h"
#include "core/heap.h"
#include "core/log.h"
#include "dist/communicator.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/trainer.h"

namespace {

int g_rank = 0;

// The first SIGTERM/SIGINT/SIGHUP: checkpoint at the next step, then exit 143. Said at once (with
// write(2), async-signal-safe) so that a user at the terminal knows that a second signal ends the
// process without a checkpoint.
void on_first_signal(int signal) {
  hpcnn::train::request_stop(signal);
  static constexpr char kSaid[] =
      "dist-train: stop requested: checkpointing after the current step (a second signal stops at once, without one)\n";
  if (g_rank == 0 && ::write(2, kSaid, sizeof kSaid - 1) < 0) return;  // nothing to do if stderr is gone
}

}  // namespace

int main(int argc, char** argv) {
  int status = 0;
  const std::unique_ptr<hpcnn::dist::Communicator> comm = hpcnn::tool::tool_communicator("dist-train", &argc, &argv, &status);
  if (!comm) return status;
  hpcnn::set_process_identity(comm->rank(), comm->host());
  g_rank = comm->rank();  // device errors name the rank and host
  std::string config, resume, evaluate, model, output, metrics, checkpoint, split = "test";
  int epochs = 0, batch = 0, threads = -1, spatial = 0, pipeline = 0, micro = 0;
  std::string pipeline_schedule, pipeline_cuts;
  bool pipeline_masked = false;
  double lr = 0;
  bool print_config = false, force = false, fine_tune = false;
  std::vector<std::string> sets;
  return hpcnn::tool::run_tool(
      [&] {
        hpcnn::tool::ToolSpec spec = hpcnn::tool::mpi_tool_spec(
            "dist-train",
            "Data-parallel training of an ONNX CNN: launch with `mpirun -np N dist-train --config FILE`\n"
            "(MPI on CPUs) or run it as one process. Flags override configuration keys; logs go to stderr\n"
            "(rank 0; other ranks only warnings and errors), the final summary as JSON to stdout.",
            *comm);
        spec.graceful_stop = on_first_signal;
        return spec;
      }(),
      argc, argv,
      [&](CLI::App& app) {
        app.add_option("--config", config, "JSON configuration (configs/README.md documents every key)");
        app.add_option("--model", model, "Override 'model': the ONNX model to train");
        app.add_option("-o,--output", output, "Override 'output': where to write the trained ONNX model");
        app.add_flag("-f,--force", force, "Replace an existing output model");
        app.add_option("--epochs", epochs, "Override 'epochs'")->check(hpcnn::tool::positive_number);
        app.add_option("--batch-size", batch, "Override 'batch_size' (per rank)")->check(hpcnn::tool::positive_number);
        app.add_option("--lr", lr, "Override 'lr.base'")->check(hpcnn::tool::positive_number);
        app.add_option("--threads", threads, "Override 'threads' (per rank; 0 = cores / ranks on the node)")
            ->check(hpcnn::tool::non_negative_number);
        app.add_option("--spatial-split", spatial,
                       "Override 'parallel.spatial': groups of S consecutive ranks share each 3-D sample, one depth slab "
                       "per rank (global batch = batch_size x ranks / S)")
            ->check(hpcnn::tool::positive_number);
        app.add_option("--pipeline-stages", pipeline,
                       "Override 'parallel.pipeline': cut the model into P stages (ranks = P x D, stage-major; global "
                       "batch = batch_size x D)")
            ->check(hpcnn::tool::positive_number);
        app.add_option("--micro-batches", micro, "Override 'parallel.micro_batches': micro-batches per replica batch (m >= P)")
            ->check(hpcnn::tool::positive_number);
        app.add_option("--pipeline-schedule", pipeline_schedule, "Override 'parallel.pipeline_schedule': gpipe or 1f1b")
            ->check(CLI::IsMember({"gpipe", "1f1b"}));
        app.add_option("--pipeline-cuts", pipeline_cuts,
                       "Override 'parallel.pipeline_cuts': the P - 1 tensors to cut after, comma-separated (default: "
                       "balanced by MACs)");
        app.add_flag("--pipeline-masked-channels", pipeline_masked,
                     "Set 'parallel.pipeline_masked_channels': stage messages carry only the channels that are not "
                     "structurally zero (a prune-rate --mask-channels model)");
        app.add_option("--metrics", metrics, "Override 'metrics': JSON lines, one per epoch");
        app.add_option("--checkpoint", checkpoint, "Override 'checkpoint.path'");
        app.add_option("--set", sets, "Override any key: --set optimizer.type=lars (repeatable; value as JSON or a string)");
        app.add_flag("--fine-tune", fine_tune,
                     "Fine-tuning preset (of a pruned --model): a tenth of the configuration's lr.base, no warm-up,\n"
                     "no Final Polishing; --lr and --set still override it");
        app.add_flag("--print-config", print_config, "Print the merged configuration as JSON and exit");
        app.add_option("--resume", resume,
                       "Resume from this checkpoint (also with another number of ranks); 'auto': from the\n"
                       "checkpoint path (--checkpoint, checkpoint.path) when a file is there, else start fresh");
        app.add_option("--evaluate", evaluate, "Report the test accuracy and loss of this ONNX model, without training");
        app.add_option("--split", split,
                       "With --evaluate: test (data.test_*) or validation (the data.validation_samples held out)")
            ->check(CLI::IsMember({"test", "validation"}));
      },
      [&](const hpcnn::tool::Context& ctx) {
        hpcnn::retain_freed_memory();  // each step's buffers stay in the heap for the next (core/heap.h)
        std::vector<std::pair<std::string, std::string>> overrides;
        auto str = [](const std::string& s) { return nlohmann::json(s).dump(); };
        // --set first: a named flag (-o, --model, --epochs, --lr, ...) wins over a --set of its key.
        for (const auto& s : sets) {
          const auto eq = s.find('=');
          if (eq == std::string::npos || eq == 0)
            hpcnn::throw_error(hpcnn::ErrorKind::usage, "--set '" + s + "': expected KEY=VALUE");
          overrides.emplace_back(s.substr(0, eq), s.substr(eq + 1));
        }
        if (!model.empty()) overrides.emplace_back("model", str(model));
        if (!output.empty()) overrides.emplace_back("output", str(output));
        if (!metrics.empty()) overrides.emplace_back("metrics", str(metrics));
        if (!checkpoint.empty()) overrides.emplace_back("checkpoint.path", str(checkpoint));
        if (epochs > 0) overrides.emplace_back("epochs", std::to_string(epochs));
        if (batch > 0) overrides.emplace_back("batch_size", std::to_string(batch));
        if (lr > 0) overrides.emplace_back("lr.base", nlohmann::json(lr).dump());
        if (threads >= 0) overrides.emplace_back("threads", std::to_string(threads));
        if (spatial > 0) overrides.emplace_back("parallel.spatial", std::to_string(spatial));
        if (pipeline > 0) overrides.emplace_back("parallel.pipeline", std::to_string(pipeline));
        if (micro > 0) overrides.emplace_back("parallel.micro_batches", std::to_string(micro));
        if (pipeline_masked) overrides.emplace_back("parallel.pipeline_masked_channels", "true");
        if (!pipeline_schedule.empty()) overrides.emplace_back("parallel.pipeline_schedule", str(pipeline_schedule));
        if (!pipeline_cuts.empty()) {
          nlohmann::json names = nlohmann::json::array();
          for (size_t b = 0, e; b <= pipeline_cuts.size(); b = e + 1) {
            e = std::min(pipeline_cuts.find(',', b), pipeline_cuts.size());
            names.push_back(pipeline_cuts.substr(b, e - b));
          }
          overrides.emplace_back("parallel.pipeline_cuts", names.dump());
        }
        if (split != "test" && evaluate.empty())
          hpcnn::throw_error(hpcnn::ErrorKind::usage, "--split goes with --evaluate MODEL");
        if (!evaluate.empty() && model.empty()) overrides.emplace_back("model", str(evaluate));
        if (fine_tune) {  // the preset goes before the flags, so that they override it
          const hpcnn::train::TrainConfig file = hpcnn::train::load_config(config, overrides);
          const double base = file.merged["lr"]["base"].get<double>();
          overrides.insert(
              overrides.begin(),
              {{"lr.base", nlohmann::json(base / 10).dump()}, {"lr.warmup_epochs", "0"}, {"final_polish_epochs", "0"}});
        }
        const hpcnn::train::TrainConfig cfg = hpcnn::train::load_config(config, overrides);
        if (print_config) {
          if (comm->rank() == 0) std::cout << cfg.merged.dump(2) << std::endl;
          return 0;
        }
        if (comm->rank() == 0)
          for (const auto& w : cfg.warnings) spdlog::warn("{}", w);
        nlohmann::json result;
        if (!evaluate.empty()) {
          result = hpcnn::train::run_evaluation(cfg, *comm, evaluate, split);
        } else {
          hpcnn::train::RunOptions ro;
          ro.resume = resume == "auto" ? hpcnn::train::checkpoint_to_resume(cfg, *comm) : resume;
          // The output policy, before any work (rank 0 writes): the model needs -f to be replaced,
          // except by a resumed run whose checkpoint was written for that output (it continues the
          // run that wrote it); the metrics and the checkpoint are rewritten as training runs (the
          // checkpoint may be the one --resume continues).
          if (comm->rank() == 0) {
            const bool continues_output = !ro.resume.empty() && !cfg.output.empty() && [&] {
              const std::string was = hpcnn::train::read_checkpoint_header(ro.resume).output;
              return !was.empty() && hpcnn::tool::same_file(was, cfg.output);
            }();
            if (continues_output) spdlog::info("{} continues the run that wrote {}: it will be replaced", ro.resume, cfg.output);
            hpcnn::tool::prepare_outputs({{cfg.output, "the output model", continues_output},
                                          {cfg.metrics, "the metrics file", true},
                                          {cfg.checkpoint, "the checkpoint", true}},
                                         {cfg.model}, force);
          }
          std::unique_ptr<hpcnn::tool::ProgressBar> bar;
          int64_t bar_epoch = -1;
          if (ctx.progress)
            ro.on_step = [&](int64_t epoch, int64_t epochs_total, int64_t done, int64_t total, double loss) {
              if (epoch != bar_epoch)
                bar = std::make_unique<hpcnn::tool::ProgressBar>(
                    true, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs_total), total);
              bar_epoch = epoch;
              bar->update(done, loss);
            };
          result = hpcnn::train::run_training(cfg, *comm, ro);
          result["allocator"] = hpcnn::tool::allocator_name();
        }
        if (comm->rank() == 0) std::cout << result.dump() << std::endl;
        return result.value("stopped", false) ? hpcnn::train::kStoppedExitCode : 0;
      });
}
