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

EvalResult eval_result(const EvalSums& s) {
  EvalResult r;
  r.samples = static_cast<int64_t>(s.count);
  if (s.count > 0) {
    r.top1 = s.top1 / s.count;
    r.top5 = s.top5 / s.count;
    r.mean_loss = s.loss / s.count;
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
