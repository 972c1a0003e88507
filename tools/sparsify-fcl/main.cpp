// sparsify-fcl: replaces the first fully connected layer after the last convolution with a
// structured sparse one (Matsumura et al., CCPE 2021), initialised from the dense weights.
#include <spdlog/spdlog.h>

#include <iostream>

#include "common/data_options.h"
#include "common/model_outputs.h"
#include "common/numbers.h"
#include "common/outputs.h"
#include "common/tool.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "data/source.h"
#include "dist/communicator.h"
#include "fcl/sparse_fcl.h"
#include "measure/channel_moments.h"
#include "onnx/model.h"

int main(int argc, char** argv) {
  std::string model, output, layer, structure = "channel", init = "svd";
  hpcnn::tool::ModelOutputFlags out;
  int64_t channels = 0, width = 0;
  double compression = 0;
  uint64_t seed = 1;
  bool allow_full_rank = false;
  hpcnn::tool::DataOptions data;
  int64_t batches = 100, batch_size = 128;
  CLI::Option *opt_channels = nullptr, *opt_width = nullptr, *opt_compression = nullptr, *opt_layer = nullptr;
  return hpcnn::tool::run_tool(
      {.name = "sparsify-fcl",
       .description = "Replaces the first fully connected layer after the last convolution with a structured sparse\n"
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
        opt_layer =
            app.add_option("--layer", layer, "The FC layer (node name) to replace (default: the first after the last Conv)");
        app.add_option("--structure", structure, "channel (1x1 reduction, default) or spatial (per-channel FC over positions)")
            ->check(CLI::IsMember({"channel", "spatial"}));
        opt_width = app.add_option("--spatial-width", width, "k, outputs per channel (spatial structure)");
        app.add_option("--init", init,
                       "Initialisation: svd (truncated SVD of the dense weight, default), data (weighted by the\n"
                       "input channels' second moment on training data: --config or --data), or random")
            ->check(CLI::IsMember({"svd", "data", "random"}));
        hpcnn::tool::add_data_options(app, data);
        app.add_option("--batches", batches, "Batches of --init data (default 100)")
            ->check(hpcnn::tool::positive_number)
            ->group("Training data");
        app.add_option("--batch-size", batch_size, "Samples per batch (default 128)")
            ->check(hpcnn::tool::positive_number)
            ->group("Training data");
        app.add_option("--seed", seed, "Seed of --init random (default 1)");
        app.add_flag("--allow-full-rank", allow_full_rank, "Permit C' = C (k = H*W): no compression, e.g. to check the rewrite");
        hpcnn::tool::add_model_output_flags(app, out);
      },
      [&](const hpcnn::tool::Context&) {
        hpcnn::fcl::SparsifyOptions o;
        o.model = model;
        if (output == "-")
          hpcnn::throw_error(hpcnn::ErrorKind::usage, "-o -: sparsify-fcl writes models to files, not to stdout");
        o.output = output;
        if (opt_channels->count()) o.channels = channels;
        if (opt_width->count()) o.spatial_width = width;
        if (opt_compression->count()) o.compression = compression;
        if (opt_layer->count()) o.layer = layer;
        o.structure = structure == "spatial" ? hpcnn::fcl::Structure::spatial : hpcnn::fcl::Structure::channel;
        o.init = init == "random" ? hpcnn::fcl::Init::random : init == "data" ? hpcnn::fcl::Init::data : hpcnn::fcl::Init::svd;
        const bool data_given = data.given();
        if (data_given != (o.init == hpcnn::fcl::Init::data))
          hpcnn::throw_error(hpcnn::ErrorKind::usage, data_given
                                                          ? "training data go with --init data"
                                                          : "--init data needs training data: --config TRAIN.json or --data ...");
        hpcnn::tool::TrainingData td;
        if (data_given) {
          td = hpcnn::tool::resolve_data_options(data);
          o.input_moment = [&](const std::string& value, int64_t) {
            auto comm = hpcnn::dist::make_single_communicator();
            const hpcnn::onnxu::Model m = hpcnn::onnxu::load_model(model);
            const hpcnn::measure::ChannelMoment cm =
                hpcnn::measure::channel_second_moment(m.proto, model, value, hpcnn::tool::open_training_data(td),
                                                      hpcnn::tool::first_batches_options(td, batches, batch_size), *comm);
            spdlog::info("second moment of the {} channels of '{}' over {} samples of {}", cm.channels, value, cm.samples,
                         td.data.train_images);
            return std::make_pair(
                cm.second_moment,
                nlohmann::ordered_json{
                    {"images", td.data.train_images}, {"value", value}, {"batches", cm.batches}, {"samples", cm.samples}});
          };
        }
        o.seed = seed;
        o.allow_full_rank = allow_full_rank;
        o.external_data = out.external_data();
        o.overwrite = out.force;
        hpcnn::fcl::validate_options(o);
        hpcnn::tool::prepare_outputs(
            {{output, "the output"}, {output + ".data", "the output's external data", true}, {out.report, "--report"}}, {model},
            out.force);
        hpcnn::tool::Report report(out.report);
        report.write(hpcnn::fcl::run_sparsify(o).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
        return 0;
      });
}
