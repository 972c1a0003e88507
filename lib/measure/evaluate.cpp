#include "measure/evaluate.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "data/loader.h"
#include "measure/input_shape.h"
#include "nn/spatial.h"
#include "onnx/costs.h"
#include "onnx/model.h"
#include "onnx/shapes.h"
#include "spatial/group.h"

namespace hpcnn::measure {

nn::EvalSums evaluate_samples(nn::Model& model, const EvalOptions& options, dist::Communicator& comm,
                              const std::shared_ptr<const data::SampleSource>& samples) {
  data::LoaderOptions o;
  o.mode = data::LoaderMode::evaluate;
  o.batch_size = options.batch_size;
  const int S = std::max(1, options.slabs), slab = comm.rank() % S;
  o.rank = comm.rank() / S;
  o.world_size = comm.size() / S;
  o.slab = slab;
  o.slabs = S;
  o.seed = options.seed;
  o.prefetch = options.prefetch;
  o.augment = options.normalise;
  o.augment_enabled = false;
  data::BatchLoader loader(samples, o);
  loader.start_epoch(0);
  const int64_t K = samples->target_width();
  nn::EvalSums e;
  while (auto b = loader.next_batch()) {
    if (K > 0)
      nn::evaluate_regression_batch(model, b->images, b->targets, e);
    else
      nn::evaluate_batch(model, b->images, b->labels, e, 0.0f,
                         [&](int64_t n) { return samples->locate(b->indices[static_cast<size_t>(n)]); });
  }
  if (slab != 0) e = nn::EvalSums{};  // the group's ranks saw the same samples: count them once
  std::vector<double> flat = e.flat(K);
  comm.allreduce_sum(flat.data(), flat.size());
  return nn::EvalSums::from_flat(flat, K);
}

nlohmann::json metrics_json(const nn::EvalResult& e, const std::string& prefix) {
  if (e.targets > 0)
    return {{prefix + "mse", e.mse}, {prefix + "mae", e.mae}, {prefix + "mae_per_target", e.mae_per_target}};
  return {{prefix + "accuracy", e.top1}, {prefix + "top5", e.top5}, {prefix + "loss", e.mean_loss}};
}

nlohmann::json evaluate_model(const std::string& path, const std::string& split, const data::DataConfig& data,
                              const EvalOptions& options, dist::Communicator& comm) {
  if (split != "test" && split != "validation")
    throw_error(ErrorKind::usage, "evaluation split '" + split + "': expected test or validation");
  const onnxu::Model proto = onnxu::load_model(path);
  const onnxu::Costs costs = onnxu::count_costs(onnxu::GraphView(proto.proto.graph()), onnxu::infer_shapes(proto.proto));
  // A spatial split (nn/spatial.h): the model split for the group of options.slabs ranks.
  std::unique_ptr<spatial::SpatialGroup> group;
  nn::ModelOptions mo;
  if (options.slabs > 1) {
    group = std::make_unique<spatial::SpatialGroup>(comm, options.slabs);
    mo.slabs = group.get();
  }
  nn::Model model(options.slabs > 1 ? nn::split_depth(proto.proto, path, options.slabs).model : proto.proto, path, mo);
  const std::shared_ptr<const data::SampleSource> src = data::open_split(data, split);
  const auto t0 = std::chrono::steady_clock::now();
  check_input_shape(proto.proto, path, *src);
  if (src->target_width() > 0) check_output_width(proto.proto, path, src->target_width(), src->origin());
  const nn::EvalResult e = nn::eval_result(evaluate_samples(model, options, comm, src));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json out{{"model", path}, {"split", split}, {"samples", e.samples}};
  out.update(metrics_json(e, e.targets > 0 ? "" : split + "_"));
  out.update(nlohmann::json{{"seconds", secs},
                        {"images_per_second", secs > 0 ? static_cast<double>(e.samples) / secs : 0.0},
                        {"parameters", costs.params},
                        {"macs", costs.macs},
                            {"model_bytes", static_cast<int64_t>(std::filesystem::file_size(path))},
                            {"world_size", comm.size()},
                            {"spatial_split", std::max(1, options.slabs)}});
  return out;
}

}  // namespace hpcnn::measure
