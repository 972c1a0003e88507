// hpcnn measure: the second moment of a model's intermediate channels on data, for sparsify-fcl's
// data-aware initialisation (fcl/factorize.h, Init::data).
//
// The model runs in inference mode (BatchNormalization with running statistics, no Dropout, images
// only normalised) on the first `batches` batches of `batch_size` samples; `value` (a 4-D
// [N, C, H, W] or 5-D [N, C, D, H, W] intermediate, e.g. the input of the flatten before the first
// FC layer) is taken as an extra graph output, and the result is the C x C matrix (row-major, double)
//   Sigma[c, d] = (1 / (samples * P)) * sum over samples n and positions s of x[n, c, s] * x[n, d, s],
// P = H * W (D * H * W) positions,
// the channels' second moment over positions and samples. Under mpirun batch b runs on rank
// b mod W and the sums are allreduced (every rank gets the result).
// Errors: ErrorKind::bad_input when `value` is not 4-D or 5-D or the data are empty; model errors name
// the node; ErrorKind::usage for batches or batch_size < 1.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/source.h"
#include "dist/communicator.h"
#include "measure/sensitivity.h"

namespace hpcnn::measure {

struct ChannelMoment {
  int64_t channels = 0, samples = 0, batches = 0;
  std::vector<double> second_moment;  // [channels, channels]
};

ChannelMoment channel_second_moment(const onnx::ModelProto& model, const std::string& origin, const std::string& value,
                                    std::shared_ptr<const data::SampleSource> samples, const SensitivityOptions& options,
                                    dist::Communicator& comm);

}  // namespace hpcnn::measure
