#include "nn/evaluate.h"

#include <cstring>

#include "core/error.h"
#include "nn/loss.h"

namespace hpcnn::nn {

void check_labels(std::span<const int32_t> labels, int64_t classes, const SampleNamer& name) {
  for (size_t n = 0; n < labels.size(); ++n)
    if (labels[n] < 0 || labels[n] >= classes)
      throw_error(ErrorKind::bad_input,
                  "label " + std::to_string(labels[n]) + " of " +
                      (name ? name(static_cast<int64_t>(n)) : "sample " + std::to_string(n) + " of the batch") +
                      " is outside [0, " + std::to_string(classes) + "): the model has " + std::to_string(classes) + " outputs");
}

void evaluate_batch(Model& model, const Tensor& images, std::span<const int32_t> labels, EvalSums& sums, float label_smoothing,
                    const SampleNamer& name) {
  if (model.input_names().size() != 1)
    throw_error(ErrorKind::unsupported,
                "evaluation needs a model with one input, this one has " + std::to_string(model.input_names().size()));
  std::vector<Tensor> out = model.forward({images}, Mode::inference);
  if (out.at(0).rank() == 2) check_labels(labels, out.at(0).dim(1), name);
  const LossResult l = softmax_cross_entropy(out.at(0), labels, label_smoothing, nullptr);
  const double n = static_cast<double>(labels.size());
  sums.loss += l.loss * n;
  sums.top1 += static_cast<double>(l.correct1);
  sums.top5 += static_cast<double>(l.correct5);
  sums.count += n;
}

void evaluate_regression_batch(Model& model, const Tensor& images, const Tensor& targets, EvalSums& sums) {
  if (model.input_names().size() != 1)
    throw_error(ErrorKind::unsupported,
                "evaluation needs a model with one input, this one has " + std::to_string(model.input_names().size()));
  std::vector<Tensor> out = model.forward({images}, Mode::inference);
  const RegressionLoss l = mean_squared_error(out.at(0), targets, nullptr);
  const double n = static_cast<double>(targets.dim(0));
  RegressionSums& r = sums.regression;
  if (r.absolute_error_per_target.empty()) r.absolute_error_per_target.assign(l.sums.absolute_error_per_target.size(), 0.0);
  r.squared_error += l.sums.squared_error;
  r.absolute_error += l.sums.absolute_error;
  for (size_t k = 0; k < r.absolute_error_per_target.size(); ++k)
    r.absolute_error_per_target[k] += l.sums.absolute_error_per_target[k];
  r.values += l.sums.values;
  sums.loss += l.mse * n;
  sums.count += n;
}

std::vector<double> EvalSums::flat(int64_t targets) const {
  std::vector<double> v{loss, top1, top5, count, regression.squared_error, regression.absolute_error, regression.values};
  for (int64_t k = 0; k < targets; ++k)
    v.push_back(static_cast<size_t>(k) < regression.absolute_error_per_target.size()
                    ? regression.absolute_error_per_target[static_cast<size_t>(k)]
                    : 0.0);
  return v;
}

EvalSums EvalSums::from_flat(const std::vector<double>& v, int64_t targets) {
  EvalSums s{v.at(0), v.at(1), v.at(2), v.at(3), {v.at(4), v.at(5), {}, v.at(6)}};
  for (int64_t k = 0; k < targets; ++k) s.regression.absolute_error_per_target.push_back(v.at(7 + static_cast<size_t>(k)));
  return s;
}

EvalResult eval_result(const EvalSums& s) {
  EvalResult r;
  r.samples = static_cast<int64_t>(s.count);
  if (s.count > 0) {
    r.top1 = s.top1 / s.count;
    r.top5 = s.top5 / s.count;
    r.mean_loss = s.loss / s.count;
  }
  const RegressionSums& g = s.regression;
  r.targets = static_cast<int64_t>(g.absolute_error_per_target.size());
  if (r.targets > 0 && g.values > 0) {
    r.mse = g.squared_error / g.values;
    r.mae = g.absolute_error / g.values;
    for (double e : g.absolute_error_per_target) r.mae_per_target.push_back(e / s.count);
  }
  return r;
}

EvalResult evaluate(Model& model, const Tensor& images_in, std::span<const int32_t> labels, int batch_size,
                    float label_smoothing) {
  const Tensor images = to_layout(images_in, Layout::plain);
  if (images.rank() < 1) throw_error(ErrorKind::bad_input, "evaluation images have no batch axis");
  const int64_t N = images.dim(0);
  if (static_cast<int64_t>(labels.size()) != N)
    throw_error(ErrorKind::bad_input, std::to_string(labels.size()) + " labels for " + std::to_string(N) + " images");
  if (batch_size <= 0) throw_error(ErrorKind::usage, "evaluation batch size must be positive");
  const int64_t per = N ? images.numel() / N : 0;
  EvalSums sums;
  for (int64_t b = 0; b < N; b += batch_size) {
    const int64_t n = std::min<int64_t>(batch_size, N - b);
    Shape s = images.shape();
    s[0] = n;
    Tensor x(s);
    std::memcpy(x.data(), images.data() + b * per, static_cast<size_t>(n * per) * sizeof(float));
    evaluate_batch(model, x, labels.subspan(static_cast<size_t>(b), static_cast<size_t>(n)), sums, label_smoothing);
  }
  return eval_result(sums);
}

}  // namespace hpcnn::nn
