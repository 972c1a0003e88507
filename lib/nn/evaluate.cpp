#include "nn/evaluate.h"

#include <cstring>

#include "core/error.h"
#include "nn/loss.h"

namespace hpcnn::nn {

EvalResult evaluate(Model& model, const Tensor& images_in, std::span<const int32_t> labels, int batch_size,
                    float label_smoothing) {
  const Tensor images = to_layout(images_in, Layout::plain);
  if (images.rank() < 1) throw_error(ErrorKind::bad_input, "evaluation images have no batch axis");
  const int64_t N = images.dim(0);
  if (static_cast<int64_t>(labels.size()) != N)
    throw_error(ErrorKind::bad_input, std::to_string(labels.size()) + " labels for " + std::to_string(N) + " images");
  if (batch_size <= 0) throw_error(ErrorKind::usage, "evaluation batch size must be positive");
  if (model.input_names().size() != 1)
    throw_error(ErrorKind::unsupported, "evaluation needs a model with one input, this one has " + std::to_string(model.input_names().size()));
  const int64_t per = N ? images.numel() / N : 0;
  EvalResult r;
  double loss_sum = 0;
  int64_t c1 = 0, c5 = 0;
  for (int64_t b = 0; b < N; b += batch_size) {
    const int64_t n = std::min<int64_t>(batch_size, N - b);
    Shape s = images.shape();
    s[0] = n;
    Tensor x(s);
    std::memcpy(x.data(), images.data() + b * per, static_cast<size_t>(n * per) * sizeof(float));
    std::vector<Tensor> out = model.forward({x}, Mode::inference);
    LossResult l = softmax_cross_entropy(out.at(0), labels.subspan(static_cast<size_t>(b), static_cast<size_t>(n)),
                                         label_smoothing, nullptr);
    loss_sum += l.loss * static_cast<double>(n);
    c1 += l.correct1;
    c5 += l.correct5;
  }
  r.samples = N;
  if (N) {
    r.top1 = static_cast<double>(c1) / N;
    r.top5 = static_cast<double>(c5) / N;
    r.mean_loss = loss_sum / N;
  }
  return r;
}

}  // namespace hpcnn::nn
