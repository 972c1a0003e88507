// prune-rate: automatic per-layer structured pruning rates from the L1 pruning error
// (Sakai et al., ICPR 2022); writes the physically smaller ONNX model with -o.
#include <iostream>

#include "common/numbers.h"
#include "common/outputs.h"
#include "common/tool.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "prune/prune_rate.h"

namespace {

using hpcnn::ErrorKind;
using hpcnn::throw_error;

}  // namespace

int main(int argc, char** argv) {
  std::string model, output, thresholds_file, rates, report_file, external = "auto";
  double threshold = 0, target_params = 0, target_macs = 0, uniform = 0;
  bool force = false;
  CLI::Option *opt_threshold = nullptr, *opt_params = nullptr, *opt_macs = nullptr, *opt_rates = nullptr, *opt_uniform = nullptr;
  return hpcnn::tool::run_tool(
      {.name = "prune-rate",
       .description =
           "Derives per-layer structured pruning rates from the L1 pruning error of the removed filters\n"
           "(Sakai et al., ICPR 2022) and writes the physically smaller ONNX model.\n"
           "The JSON report goes to stdout (or --report FILE); logs go to stderr."},
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
        opt_uniform = app.add_option("--rate", uniform,
                                     "One pruning rate in [0, 1) for every prunable layer: the smallest-L1 filters go (baseline)");
        opt_rates = app.add_option("--rates", rates, "Comma-separated grid of candidate rates in [0, 1) (default 0,0.1,...,0.9)");
        app.add_option("--report", report_file, "Write the JSON report to this file instead of stdout");
        app.add_option("--external-data", external,
                       "Store the weights in '<output>.data': auto (when the input did, or over 2 GiB), always, never")
            ->check(CLI::IsMember({"auto", "always", "never"}));
        app.add_flag("-f,--force", force, "Overwrite existing output files");
      },
      [&](const hpcnn::tool::Context&) {
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
        o.external_data = external == "always"  ? hpcnn::onnxu::ExternalData::always
                          : external == "never" ? hpcnn::onnxu::ExternalData::never
                                                : hpcnn::onnxu::ExternalData::automatic;
        o.overwrite = force;
        hpcnn::prune::validate_options(o);
        // The output policy, before any work: the model, its external data file (only when
        // written: save_model applies -f to it then) and the report.
        hpcnn::tool::prepare_outputs({{output, "the output"},
                                      {output.empty() ? std::string() : output + ".data", "the output's external data", true},
                                      {report_file, "--report"}},
                                     {model}, force);

        const nlohmann::ordered_json report = hpcnn::prune::run_prune_rate(o);
        const std::string text = report.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
        if (report_file.empty()) {
          std::cout << text << std::flush;
          if (!std::cout) throw_error(ErrorKind::io, "cannot write the report to stdout");
        } else {
          hpcnn::AtomicFile f(report_file, true);
          f.write(text.data(), text.size());
          f.commit();
        }
        return 0;
      });
}
