// prune-rate: automatic per-layer structured pruning rates from the L1 pruning error
// (Sakai et al., ICPR 2022); writes the physically smaller ONNX model with -o.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "common/data_options.h"
#include "common/model_outputs.h"
#include "common/numbers.h"
#include "common/outputs.h"
#include "common/tool.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "data/source.h"
#include "dist/communicator.h"
#include "measure/sensitivity.h"
#include "onnx/model.h"
#include "prune/magnitude.h"
#include "prune/prune_rate.h"

namespace {

using hpcnn::ErrorKind;
using hpcnn::throw_error;

// Data flags on the command line: the data-driven thresholds, whose batches the ranks split.
bool has_data_flags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    for (const char* flag : {"--config", "--data"})
      if (a == flag || a.rfind(std::string(flag) + "=", 0) == 0) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // Under mpirun the data-driven measurement is split over the ranks; rank 0 does the rest. MPI is
  // initialised (by the tool frame, as in dist-train and bn-polish) only for data-driven thresholds
  // or under a launcher: a plain run stays a plain process, whose ONNX shape inference keeps its
  // crash isolation in a child process (an MPI process must not fork: onnx/shapes.h).
  int status = 0;
  const std::unique_ptr<hpcnn::dist::Communicator> comm = hpcnn::tool::tool_communicator(
      "prune-rate", &argc, &argv, &status, has_data_flags(argc, argv) || hpcnn::tool::launched_by_mpi());
  if (!comm) return status;
  hpcnn::tool::DataOptions data;
  int64_t batches = 100, batch_size = 128;
  double margin = 0.1, loss_before = 0, upper_bound = 0;
  CLI::Option *opt_loss_before = nullptr, *opt_upper = nullptr;
  std::string model, output, thresholds_file, rates, keep;
  hpcnn::tool::ModelOutputFlags out;
  bool mask_channels = false;
  double threshold = 0, target_params = 0, target_macs = 0, uniform = 0, unstructured = 0;
  CLI::Option *opt_unstructured = nullptr, *opt_threshold = nullptr, *opt_params = nullptr, *opt_macs = nullptr, *opt_rates = nullptr, *opt_uniform = nullptr,
              *opt_keep = nullptr;
  return hpcnn::tool::run_tool(
      hpcnn::tool::mpi_tool_spec("prune-rate",
                                 "Derives per-layer structured pruning rates from the L1 pruning error of the removed filters\n"
                                 "(Sakai et al., ICPR 2022) and writes the physically smaller ONNX model. With training data\n"
                                 "(--config or --data) the per-layer thresholds come from the model's loss and connection\n"
                                 "sensitivity (under mpirun the batches are split over the ranks).\n"
                                 "The JSON report goes to stdout (or --report FILE); logs go to stderr.",
                                 *comm),
      argc, argv,
      [&](CLI::App& app) {
        app.add_option("model", model, "Input ONNX model")->required();
        app.add_option("-o,--output", output, "Write the pruned ONNX model here (atomically)");
        opt_threshold = app.add_option("--threshold", threshold, "Pruning-error threshold for every layer (>= 0)");
        app.add_option("--thresholds", thresholds_file,
                       "JSON file {\"layer name\": threshold}; layers not named use --threshold, or stay unpruned");
        opt_params = app.add_option("--target-params-reduction", target_params,
                                    "Search the one global threshold closest to this parameter reduction, in (0, 1)");
        opt_macs = app.add_option("--target-macs-reduction", target_macs,
                                  "Search the one global threshold closest to this MAC reduction, in (0, 1)");
        opt_uniform = app.add_option(
            "--rate", uniform, "One pruning rate in [0, 1) for every prunable layer: the smallest-L1 filters go (baseline)");
        opt_unstructured = app.add_option(
            "--unstructured", unstructured,
            "Unstructured magnitude pruning instead: zero the fraction R in [0, 1) of smallest-|w| entries of each Conv/Gemm "
            "weight (per tensor), keeping shapes (the fixed mask of dist-train's sparse / mask keys)");
        app.add_flag("--mask-channels", mask_channels,
                     "Keep every shape: the chosen filters' weights and biases and their BatchNormalization's scale and "
                     "bias become 0 instead of being removed (same rates and channels; dist-train's "
                     "parallel.pipeline_masked_channels sends only the kept channels)");
        opt_rates = app.add_option("--rates", rates, "Comma-separated grid of candidate rates in [0, 1) (default 0,0.1,...,0.9)");
        opt_keep = app.add_option("--keep", keep,
                                  "Comma-separated layers never pruned (with every layer that shares their channels), e.g. "
                                  "the FC layer sparsify-fcl will replace");
        hpcnn::tool::add_model_output_flags(app, out);
        hpcnn::tool::add_data_options(app, data);
        const std::string dd = "Data-driven thresholds";
        app.add_option("--batches", batches, "Batches of the loss and sensitivity (default 100; fewer if the data end)")
            ->check(hpcnn::tool::positive_number)
            ->group(dd);
        app.add_option("--batch-size", batch_size, "Samples per batch (default 128)")
            ->check(hpcnn::tool::positive_number)
            ->group(dd);
        app.add_option("--margin", margin, "Loss margin: th = (L_before (1 + margin) - L) S / N (default 0.1)")
            ->check(hpcnn::tool::non_negative_number)
            ->group(dd);
        opt_loss_before = app.add_option("--loss-before", loss_before,
                                         "L_before, the loss of the original model (default: the measured L; the loop passes it)")
                              ->check(hpcnn::tool::non_negative_number)
                              ->group(dd);
        opt_upper = app.add_option("--upper-bound", upper_bound,
                                   "U, the bound on ||th||_2 (default: its limit U_limit; the loop passes the next U)")
                        ->check(hpcnn::tool::positive_number)
                        ->group(dd);
      },
      [&](const hpcnn::tool::Context&) {
        if (opt_unstructured->count()) {  // magnitude pruning: no rates, no data, no surgery
          for (const CLI::Option* other : {opt_threshold, opt_params, opt_macs, opt_uniform, opt_rates, opt_keep})
            if (other->count())
              throw_error(ErrorKind::usage, "--unstructured cannot be combined with " + other->get_name());
          if (!thresholds_file.empty() || data.given() || mask_channels)
            throw_error(ErrorKind::usage,
                        "--unstructured cannot be combined with --thresholds, --mask-channels or training data");
          if (output == "-") throw_error(ErrorKind::usage, "-o -: prune-rate writes models to files, not to stdout");
          if (comm->size() > 1) throw_error(ErrorKind::usage, "--unstructured runs in one process, not under mpirun");
          if (!std::isfinite(unstructured) || unstructured < 0 || unstructured >= 1)
            throw_error(ErrorKind::usage, "--unstructured " + std::to_string(unstructured) + ": the fraction of zeros must be in [0, 1)");
          hpcnn::tool::prepare_outputs({{output, "the output"},
                                        {output.empty() ? std::string() : output + ".data", "the output's external data", true},
                                        {out.report, "--report"}},
                                       {model}, out.force);
          hpcnn::tool::Report report(out.report);
          hpcnn::onnxu::Model m = hpcnn::onnxu::load_model(model);
          const auto layers = hpcnn::prune::magnitude_prune(m.proto, unstructured);
          nlohmann::ordered_json j{{"model", model}, {"unstructured", unstructured}, {"per", "tensor"}};
          int64_t elements = 0, zeros = 0;
          for (const auto& l : layers) {
            j["layers"].push_back({{"node", l.node}, {"weight", l.weight}, {"elements", l.elements}, {"zeros", l.zeros}});
            elements += l.elements;
            zeros += l.zeros;
          }
          j["elements"] = elements;
          j["zeros"] = zeros;
          if (!output.empty()) {
            hpcnn::onnxu::save_model(m.proto, output, hpcnn::onnxu::output_save_options(m, out.external_data(), out.force));
            j["output"] = output;
          }
          spdlog::info("unstructured magnitude pruning: {} of {} weight entries are zero ({} Conv/Gemm weights)", zeros, elements,
                       layers.size());
          report.write(j.dump(2) + "\n");
          return 0;
        }
        hpcnn::prune::PruneOptions o;
        o.model = model;
        if (output == "-") throw_error(ErrorKind::usage, "-o -: prune-rate writes models to files, not to stdout");
        if (!output.empty()) o.output = output;
        if (opt_threshold->count()) o.threshold = threshold;
        if (!thresholds_file.empty()) o.layer_thresholds = hpcnn::prune::read_thresholds_file(thresholds_file);
        if (opt_params->count()) o.target_params_reduction = target_params;
        if (opt_macs->count()) o.target_macs_reduction = target_macs;
        if (opt_uniform->count()) o.uniform_rate = uniform;
        if (opt_rates->count()) o.rates = hpcnn::tool::parse_number_list(rates, "--rates");
        for (size_t at = 0; opt_keep->count() && at <= keep.size();) {
          const size_t comma = std::min(keep.find(',', at), keep.size());
          if (comma == at) throw_error(ErrorKind::usage, "--keep: an empty layer name in '" + keep + "'");
          o.keep.push_back(keep.substr(at, comma - at));
          at = comma + 1;
        }
        o.mask_channels = mask_channels;
        o.external_data = out.external_data();
        o.overwrite = out.force;
        const bool data_driven = data.given();
        hpcnn::tool::TrainingData td;
        if (data_driven) {
          td = hpcnn::tool::resolve_data_options(data);
          o.data = hpcnn::prune::DataThresholdInputs{};  // filled after the measurement; validates the mode now
          o.data->margin = margin;
          if (opt_upper->count()) o.data->upper_bound = upper_bound;
        } else if (opt_loss_before->count() || opt_upper->count()) {
          throw_error(ErrorKind::usage, "--loss-before and --upper-bound need training data (--config or --data)");
        }
        hpcnn::prune::validate_options(o);
        hpcnn::prune::check_keep(o.model, o.keep);  // before the data's loss and sensitivity
        if (comm->size() > 1 && !data_driven)
          throw_error(ErrorKind::usage,
                      "under mpirun prune-rate needs training data: only the data-driven thresholds use the ranks");
        // The output policy, before any work (rank 0 writes): the model, its external data file (only
        // when written: save_model applies -f to it then) and the report.
        if (comm->rank() == 0)
          hpcnn::tool::prepare_outputs({{output, "the output"},
                                        {output.empty() ? std::string() : output + ".data", "the output's external data", true},
                                        {out.report, "--report"}},
                                       {model}, out.force);
        hpcnn::tool::Report report(comm->rank() == 0 ? out.report : std::string());
        if (data_driven) {
          const hpcnn::onnxu::Model m = hpcnn::onnxu::load_model(model);
          const hpcnn::measure::Sensitivity s =
              hpcnn::measure::measure_sensitivity(m.proto, model, hpcnn::tool::open_training_data(td),
                                                  hpcnn::tool::first_batches_options(td, batches, batch_size), *comm);
          spdlog::info("loss {:.6g} over {} batches ({} samples of {}) on {} rank(s)", s.loss, s.batches, s.samples,
                       td.data.train_images, comm->size());
          o.data->loss = s.loss;
          o.data->loss_before = opt_loss_before->count() ? loss_before : s.loss;
          o.data->sensitivity = s.sensitivity;
          o.data_info = {{"images", td.data.train_images},
                         {"batches", s.batches},
                         {"batch_size", batch_size},
                         {"samples", s.samples},
                         {"ranks", comm->size()}};
        }
        if (comm->rank() != 0) return 0;

        report.write(hpcnn::prune::run_prune_rate(o).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) +
                     "\n");
        return 0;
      });
}
