// sparsify-fcl: replaces the first fully connected layer after the last convolution with a
// structured sparse one (Matsumura et al., CCPE 2021), initialised from the dense weights.
#include <iostream>

#include "common/outputs.h"
#include "common/tool.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "fcl/sparse_fcl.h"

int main(int argc, char** argv) {
  std::string model, output, report_file, layer, structure = "channel", init = "svd", external = "auto";
  int64_t channels = 0, width = 0;
  double compression = 0;
  uint64_t seed = 1;
  bool allow_full_rank = false, force = false;
  CLI::Option *opt_channels = nullptr, *opt_width = nullptr, *opt_compression = nullptr, *opt_layer = nullptr;
  return hpcnn::tool::run_tool(
      {.name = "sparsify-fcl",
       .description =
           "Replaces the first fully connected layer after the last convolution with a structured sparse\n"
           "one (Matsumura et al., CCPE 2021): a 1x1 convolution C -> C' shared over the positions, then\n"
           "a FC from C'*H*W (--structure channel), or a per-channel FC over the H*W positions (spatial),\n"
           "initialised from the dense weights. The JSON report goes to stdout (or --report FILE)."},
      argc, argv,
      [&](CLI::App& app) {
        app.add_option("model", model, "Input ONNX model")->required();
        app.add_option("-o,--output", output, "Write the sparsified ONNX model here (atomically)")->required();
        opt_channels = app.add_option("--channels", channels, "C', the channels the 1x1 reduction keeps (channel structure)");
        opt_compression = app.add_option("--compression", compression,
                                         "Instead of --channels / --spatial-width: the largest rank whose layer compression "
                                         "(dense parameters / sparse parameters) is at least X");
        opt_layer = app.add_option("--layer", layer, "The FC layer (node name) to replace (default: the first after the last Conv)");
        app.add_option("--structure", structure, "channel (1x1 reduction, default) or spatial (per-channel FC over positions)")
            ->check(CLI::IsMember({"channel", "spatial"}));
        opt_width = app.add_option("--spatial-width", width, "k, outputs per channel (spatial structure)");
        app.add_option("--init", init, "Initialisation: svd (truncated SVD of the dense weight, default) or random")
            ->check(CLI::IsMember({"svd", "random"}));
        app.add_option("--seed", seed, "Seed of --init random (default 1)");
        app.add_flag("--allow-full-rank", allow_full_rank, "Permit C' = C (k = H*W): no compression, e.g. to check the rewrite");
        app.add_option("--report", report_file, "Write the JSON report to this file instead of stdout");
        app.add_option("--external-data", external,
                       "Store the weights in '<output>.data': auto (when the input did, or over 2 GiB), always, never")
            ->check(CLI::IsMember({"auto", "always", "never"}));
        app.add_flag("-f,--force", force, "Overwrite existing output files");
      },
      [&](const hpcnn::tool::Context&) {
        hpcnn::fcl::SparsifyOptions o;
        o.model = model;
        if (output == "-") hpcnn::throw_error(hpcnn::ErrorKind::usage, "-o -: sparsify-fcl writes models to files, not to stdout");
        o.output = output;
        if (opt_channels->count()) o.channels = channels;
        if (opt_width->count()) o.spatial_width = width;
        if (opt_compression->count()) o.compression = compression;
        if (opt_layer->count()) o.layer = layer;
        o.structure = structure == "spatial" ? hpcnn::fcl::Structure::spatial : hpcnn::fcl::Structure::channel;
        o.init = init == "random" ? hpcnn::fcl::Init::random : hpcnn::fcl::Init::svd;
        o.seed = seed;
        o.allow_full_rank = allow_full_rank;
        o.external_data = external == "always"  ? hpcnn::onnxu::ExternalData::always
                          : external == "never" ? hpcnn::onnxu::ExternalData::never
                                                : hpcnn::onnxu::ExternalData::automatic;
        o.overwrite = force;
        hpcnn::fcl::validate_options(o);
        hpcnn::tool::prepare_outputs({{output, "the output"}, {output + ".data", "the output's external data", true},
                                      {report_file, "--report"}},
                                     {model}, force);
        const nlohmann::ordered_json report = hpcnn::fcl::run_sparsify(o);
        const std::string text = report.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
        if (report_file.empty()) {
          std::cout << text << std::flush;
          if (!std::cout) hpcnn::throw_error(hpcnn::ErrorKind::io, "cannot write the report to stdout");
        } else {
          hpcnn::AtomicFile f(report_file, true);
          f.write(text.data(), text.size());
          f.commit();
        }
        return 0;
      });
}
