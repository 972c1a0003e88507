#include "measure/channel_moments.h"

#include <cmath>

#include "core/error.h"
#include "data/loader.h"
#include "measure/input_shape.h"
#include "nn/model.h"

namespace hpcnn::measure {

ChannelMoment channel_second_moment(const onnx::ModelProto& proto, const std::string& origin, const std::string& value,
                                    std::shared_ptr<const data::SampleSource> samples, const SensitivityOptions& o,
                                    dist::Communicator& comm) {
  if (o.batches < 1 || o.batch_size < 1) throw_error(ErrorKind::usage, "batches and batch size must be >= 1");
  if (samples->size() == 0) throw_error(ErrorKind::bad_input, samples->origin() + " holds no samples");
  check_input_shape(proto, origin, *samples);
  onnx::ModelProto with_output = proto;
  with_output.mutable_graph()->add_output()->set_name(value);
  nn::Model model(with_output, origin);
  const size_t out = model.output_names().size() - 1;
  const int64_t n = std::min(samples->size(), o.batches * o.batch_size);
  const int64_t B = (n + o.batch_size - 1) / o.batch_size;

  const auto loader = first_batches(samples, o);
  ChannelMoment r;
  std::vector<double> sums;  // [C*C], then the position count
  double positions = 0;
  int64_t C = -1;
  for (int64_t b = 0; b < B; ++b) {
    auto batch = loader->next_batch();
    if (!batch) throw_error(ErrorKind::bad_input, samples->origin() + ": the loader ended before batch " + std::to_string(b));
    if (b % comm.size() != comm.rank()) continue;
    const Tensor x = to_layout(model.forward({batch->images}, nn::Mode::inference).at(out), Layout::plain);
    if (x.rank() != 4 && x.rank() != 5)
      throw_error(ErrorKind::bad_input,
                  "'" + value + "' of " + origin + " is not a 4-D [N, C, H, W] or 5-D [N, C, D, H, W] tensor");
    if (C < 0) {
      C = x.dim(1);
      sums.assign(static_cast<size_t>(C * C), 0.0);
    }
    int64_t HW = 1;  // positions per channel: H * W, or D * H * W
    for (int64_t a = 2; a < x.rank(); ++a) HW *= x.dim(a);
    const float* d = x.data();
    for (int64_t i = 0; i < x.dim(0); ++i)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t e = 0; e <= c; ++e) {
          const float* xc = d + (i * C + c) * HW;
          const float* xe = d + (i * C + e) * HW;
          double s = 0;
          for (int64_t p = 0; p < HW; ++p) s += static_cast<double>(xc[p]) * xe[p];
          sums[static_cast<size_t>(c * C + e)] += s;
        }
    positions += static_cast<double>(x.dim(0) * HW);
  }
  // Ranks without a batch learn C from the others.
  int64_t c_max = C;
  comm.allreduce_max(&c_max, 1);
  if (C < 0) {
    C = c_max;
    sums.assign(static_cast<size_t>(C * C), 0.0);
  }
  sums.push_back(positions);
  comm.allreduce_sum(sums.data(), sums.size());
  positions = sums.back();
  for (double v : sums)
    if (!std::isfinite(v))
      throw_error(ErrorKind::bad_input,
                  "'" + value + "' of " + origin + " is not finite on " + samples->origin() + ": non-finite pixels?");
  r.channels = C;
  r.samples = n;
  r.batches = B;
  r.second_moment.assign(static_cast<size_t>(C * C), 0.0);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t e = 0; e <= c; ++e)
      r.second_moment[static_cast<size_t>(c * C + e)] = r.second_moment[static_cast<size_t>(e * C + c)] =
          sums[static_cast<size_t>(c * C + e)] / positions;
  return r;
}

}  // namespace hpcnn::measure
