#include "measure/sensitivity.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "data/loader.h"
#include "measure/input_shape.h"
#include "nn/evaluate.h"
#include "nn/loss.h"
#include "nn/regression.h"
#include "nn/model.h"

namespace hpcnn::measure {

std::unique_ptr<data::BatchLoader> first_batches(const std::shared_ptr<const data::SampleSource>& samples,
                                                 const SensitivityOptions& o, int slab, int slabs) {
  const int64_t n = std::min(samples->size(), o.batches * o.batch_size);
  data::LoaderOptions lo;
  lo.mode = data::LoaderMode::evaluate;
  lo.batch_size = o.batch_size;
  lo.augment = o.normalise;
  lo.augment.crop_padding = 0;
  lo.augment.horizontal_flip = false;
  lo.augment_enabled = false;
  lo.slab = slab;
  lo.slabs = slabs;
  auto loader = std::make_unique<data::BatchLoader>(std::make_shared<data::RangeSource>(samples, 0, n), lo);
  loader->start_epoch(0);
  return loader;
}

Sensitivity measure_sensitivity(const onnx::ModelProto& proto, const std::string& origin,
                                std::shared_ptr<const data::SampleSource> samples, const SensitivityOptions& o,
                                dist::Communicator& comm) {
  if (o.batches < 1 || o.batch_size < 1) throw_error(ErrorKind::usage, "sensitivity: batches and batch size must be >= 1");
  if (!samples->has_labels() && samples->target_width() == 0)
    throw_error(ErrorKind::bad_input, samples->origin() + " has no labels or targets: the loss needs them");
  if (samples->size() == 0) throw_error(ErrorKind::bad_input, samples->origin() + " holds no samples");
  check_input_shape(proto, origin, *samples);
  const int64_t n = std::min(samples->size(), o.batches * o.batch_size);
  const int64_t B = (n + o.batch_size - 1) / o.batch_size;

  nn::Model model(proto, origin);
  if (model.input_names().size() != 1)
    throw_error(ErrorKind::unsupported, origin + " has " + std::to_string(model.input_names().size()) +
                                            " inputs; the loss needs a model with one image input");
  if (model.output_names().size() > 1)
    spdlog::warn("{} has {} outputs: its first, '{}', is taken as the logits", origin, model.output_names().size(),
                 model.output_names()[0]);
  auto& params = model.parameters();
  const size_t P = params.size();
  // Per batch: the loss, then s_{b,p} for every parameter; zero where another rank computes it.
  std::vector<double> table(static_cast<size_t>(B) * (P + 1), 0.0);

  const auto loader = first_batches(samples, o);
  for (int64_t b = 0; b < B; ++b) {
    auto batch = loader->next_batch();
    if (!batch) throw_error(ErrorKind::bad_input, samples->origin() + ": the loader ended before batch " + std::to_string(b));
    if (b % comm.size() != comm.rank()) continue;
    model.zero_grad();
    Tensor grad;
    const std::vector<Tensor> out = model.forward({batch->images}, nn::Mode::inference_grad);
    double loss = 0;
    if (samples->target_width() > 0) {
      loss = nn::mean_squared_error(out.at(0), batch->targets, &grad).mse;  // regression data
    } else {
      nn::check_labels(batch->labels, out.at(0).dim(1),
                       [&](int64_t i) { return samples->locate(batch->indices[static_cast<size_t>(i)]); });
      loss = nn::softmax_cross_entropy(out.at(0), batch->labels, 0.0f, &grad).loss;
    }
    if (!std::isfinite(loss))
      throw_error(ErrorKind::bad_input, origin + ": the loss of batch " + std::to_string(b) + " (samples " +
                                            std::to_string(b * o.batch_size) + "...) is not finite");
    std::vector<Tensor> grads(out.size());
    grads[0] = grad;
    model.backward(grads);
    double* row = &table[static_cast<size_t>(b) * (P + 1)];
    row[0] = loss;
    for (size_t p = 0; p < P; ++p) {
      const Tensor g = params[p].grad.defined() ? params[p].grad.to(Device::cpu()) : Tensor();
      const int64_t count = params[p].value.numel();
      double s = 0;
      if (!g.defined()) {
        s = 1e-7 * static_cast<double>(count);  // no gradient reaches it: every element counts as zero
      } else {
        const float* d = g.data();
        for (int64_t i = 0; i < count; ++i) {
          const double a = std::fabs(static_cast<double>(d[i]));
          s += a == 0.0 ? 1e-7 : 1.0 / a;  // the authors' zero rule: |g| = 0 counts as 1e7
        }
      }
      if (!std::isfinite(s))
        throw_error(ErrorKind::bad_input, origin + ": the gradient of '" + params[p].name + "' on batch " + std::to_string(b) +
                                              " (samples " + std::to_string(b * o.batch_size) +
                                              "...) is not finite: non-finite pixels in " + samples->origin() + "?");
      row[1 + p] = s;
    }
  }
  comm.allreduce_sum(table.data(), table.size());

  Sensitivity r;
  r.batches = B;
  r.samples = n;
  std::vector<double> sum(P + 1, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (size_t k = 0; k <= P; ++k) sum[k] += table[static_cast<size_t>(b) * (P + 1) + k];
  r.loss = sum[0] / static_cast<double>(B);
  for (size_t p = 0; p < P; ++p) {
    r.sensitivity[params[p].name] = sum[1 + p] / static_cast<double>(B);
    r.elements[params[p].name] = params[p].value.numel();
  }
  return r;
}

}  // namespace hpcnn::measure
