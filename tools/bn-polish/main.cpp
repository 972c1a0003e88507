// bn-polish: re-estimates the BatchNormalization statistics of a trained ONNX model on
// non-augmented training data, weights frozen (lib/bn/polish.h); under mpirun the batches are
// split over the ranks and the statistics are exact for any world size.
#include <spdlog/spdlog.h>

#include <chrono>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "bn/polish.h"
#include "common/data_options.h"
#include "common/model_outputs.h"
#include "common/numbers.h"
#include "common/outputs.h"
#include "common/tool.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "measure/evaluate.h"
#include "onnx/model.h"

namespace {

using nlohmann::ordered_json;

double average(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

ordered_json layer_json(const hpcnn::bn::LayerStatistics& s) {
  double mean_change = 0, var_change = 0;
  for (size_t c = 0; c < s.new_mean.size(); ++c) {
    mean_change = std::max(mean_change, std::abs(s.new_mean[c] - s.old_mean[c]));
    if (s.old_var[c] > 0) var_change = std::max(var_change, std::abs(s.new_var[c] / s.old_var[c] - 1));
  }
  return {{"name", s.node},
          {"input", s.input},
          {"channels", s.channels},
          {"pass", s.pass},
          {"old", {{"mean_average", average(s.old_mean)}, {"var_average", average(s.old_var)}}},
          {"new", {{"mean_average", average(s.new_mean)}, {"var_average", average(s.new_var)}}},
          {"max_abs_mean_change", mean_change},
          {"max_rel_var_change", var_change}};
}

}  // namespace

int main(int argc, char** argv) {
  int status = 0;
  const std::unique_ptr<hpcnn::dist::Communicator> comm = hpcnn::tool::tool_communicator("bn-polish", &argc, &argv, &status);
  if (!comm) return status;
  std::string model, output;
  int64_t samples = 0, batch_size = 256;
  int spatial = 1;
  bool test_accuracy = false;
  hpcnn::tool::ModelOutputFlags out;
  hpcnn::tool::DataOptions data;
  return hpcnn::tool::run_tool(
      hpcnn::tool::mpi_tool_spec(
          "bn-polish",
          "Re-estimates the BatchNormalization statistics (running_mean, running_var) of a trained ONNX\n"
          "model on non-augmented training data, weights frozen (Final Polishing, Kasagi et al. HPDC 2020;\n"
          "PreciseBN). Under mpirun the batches are split over the ranks. The JSON report goes to stdout.",
          *comm),
      argc, argv,
      [&](CLI::App& app) {
        app.add_option("model", model, "Input ONNX model")->required();
        app.add_option("-o,--output", output, "Write the model with re-estimated statistics here (atomically)")->required();
        hpcnn::tool::add_data_options(app, data);
        app.add_option("--samples", samples, "K: the first K training samples (default: all of them)")
            ->check(hpcnn::tool::positive_number)
            ->group("Training data");
        app.add_option("--batch-size", batch_size, "Samples per forward batch (default 256; the statistics do not depend on it)")
            ->check(hpcnn::tool::positive_number)
            ->group("Training data");
        app.add_option("--spatial-split", spatial,
                       "S: groups of S consecutive ranks share each 3-D sample, one depth slab per rank (as dist-train's "
                       "--spatial-split; the statistics are the whole samples'; default 1)")
            ->check(hpcnn::tool::positive_number)
            ->group("Training data");
        app.add_flag("--test-accuracy", test_accuracy,
                     "Also report the test accuracy before and after (the --config's data.test_*; for regression "
                     "targets the mse, mae and mae_per_target instead)");
        hpcnn::tool::add_model_output_flags(app, out);
      },
      [&](const hpcnn::tool::Context&) {
        if (output == "-") hpcnn::throw_error(hpcnn::ErrorKind::usage, "-o -: bn-polish writes models to files, not to stdout");
        if (output.empty()) hpcnn::throw_error(hpcnn::ErrorKind::usage, "-o: an empty path");
        if (test_accuracy && data.config.empty())
          hpcnn::throw_error(hpcnn::ErrorKind::usage, "--test-accuracy needs --config TRAIN.json (its data.test_images/labels)");
        const hpcnn::tool::TrainingData td = hpcnn::tool::resolve_data_options(data);
        if (test_accuracy && td.data.test_images.empty())
          hpcnn::throw_error(hpcnn::ErrorKind::usage, "--test-accuracy: " + data.config + " names no data.test_images");
        // The test accuracy: in batches of --batch-size, normalised as the training data.
        hpcnn::measure::EvalOptions eval;
        eval.batch_size = static_cast<int>(batch_size);
        eval.prefetch = td.data.prefetch;
        eval.normalise = td.augmentation;
        eval.slabs = spatial;
        const auto test_accuracy_of = [&](const std::string& path) {
          return hpcnn::measure::evaluate_model(path, "test", td.data, eval, *comm);
        };
        if (comm->rank() == 0)
          hpcnn::tool::prepare_outputs(
              {{output, "the output"}, {output + ".data", "the output's external data", true}, {out.report, "--report"}}, {model},
              out.force);
        hpcnn::tool::Report report(comm->rank() == 0 ? out.report : "");
        // The accuracy before goes first: a bad test set fails before any output is written.
        nlohmann::json before;
        if (test_accuracy) before = test_accuracy_of(model);
        const auto t0 = std::chrono::steady_clock::now();
        hpcnn::onnxu::Model m = hpcnn::onnxu::load_model(model);
        hpcnn::bn::PolishOptions po;
        po.samples = samples;
        po.batch_size = batch_size;
        po.normalise.mean = td.augmentation.mean;
        po.normalise.std = td.augmentation.std;
        po.normalise.log1p = td.augmentation.log1p;
        po.slabs = spatial;
        const hpcnn::bn::PolishResult r =
            hpcnn::bn::polish_batchnorm(m.proto, model, hpcnn::tool::open_training_data(td, comm.get()), po, *comm);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r.layers.empty() && comm->rank() == 0)
          spdlog::warn(
              "{} has no BatchNormalization node: the model is written unchanged (PyTorch's default torch.onnx.export "
              "folds BatchNorm into the convolutions; docs/your-model.md shows the export that keeps it)",
              model);
        else
          spdlog::info("{} BatchNormalization node(s) re-estimated over {} samples of {} in {} pass(es), {:.1f} s",
                       r.layers.size(), r.samples, td.data.train_images, r.passes, secs);
        if (comm->rank() == 0) {
          hpcnn::onnxu::save_model(m.proto, output, hpcnn::onnxu::output_save_options(m, out.external_data(), out.force));
        }
        ordered_json j{{"model", model},
                       {"output", output},
                       {"data", td.data.train_images},
                       {"samples", r.samples},
                       {"batch_size", batch_size},
                       {"batches", r.batches},
                       {"passes", r.passes},
                       {"forward_samples", r.samples * r.passes},
                       {"seconds", secs},
                       {"world_size", comm->size()},
                       {"spatial_split", spatial},
                       {"variance", "population: sum (x - mean)^2 / n, n = samples * spatial positions (H * W, D * H * W)"}};
        ordered_json layers = ordered_json::array();
        for (const auto& s : r.layers) layers.push_back(layer_json(s));
        j["layers"] = layers;
        if (test_accuracy) {
          comm->barrier();  // the output is written
          const auto after = test_accuracy_of(output);
          // Classification: test_accuracy / test_loss; regression data: test_mse / test_mae / test_mae_per_target.
          const bool regression = before.contains("mae");
          for (const char* k : regression ? std::vector<const char*>{"mse", "mae", "mae_per_target"}
                                          : std::vector<const char*>{"test_accuracy", "test_loss"}) {
            const std::string name = regression ? std::string("test_") + k : std::string(k);
            j[name + "_before"] = before[k];
            j[name + "_after"] = after[k];
          }
          const char* headline = regression ? "mae" : "test_accuracy";
          spdlog::info("test {} {:.4f} -> {:.4f}", regression ? "mae" : "accuracy", before[headline].get<double>(),
                       after[headline].get<double>());
        }
        if (comm->rank() == 0) report.write(j.dump(2) + "\n");
        return 0;
      });
}
