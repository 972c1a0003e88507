// hpcnn nn: structurally zero channels of a channel-masked model (prune-rate --mask-channels),
// found from the weights alone, for the pipeline's masked stage messages
// (train/pipeline_schedule.h, parallel.pipeline_masked_channels).
//
// A channel is axis 1 of an activation [N, C, ...]; "zero" means every element of the channel is
// exactly 0.0 for every input, in training mode (BatchNormalization normalises with the batch's
// own moments). The rules, over the nodes in graph order:
//   Conv                   output channel c is zero if its filter W[c, ...] (constant) is all 0 and
//                          its bias B[c] is 0 (or there is no bias);
//   BatchNormalization     channel c is zero if bias_c = 0 and (scale_c = 0 or input channel c is
//                          zero): the zero channel normalises to 0 (training mode), times the scale,
//                          plus the bias;
//   Relu, LeakyRelu, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, Dropout, Identity
//                          keep the zero channels of their input 0;
//   Add                    channel c is zero if it is zero in both inputs (same channel count);
//   Concat (axis 1)        the inputs' channels, concatenated (every input known);
//   anything else, graph inputs, values with a non-constant weight: no channel known to be zero.
//
// holders() says which parameter entries keep a value's zero channels at zero: the filter and bias
// of each Conv, the bias (and the scale, where it is 0) of each BatchNormalization on the way back
// from the channel. The gradient that arrives at a zero channel only ever reaches those entries and
// other zero channels (Conv and BatchNormalization with scale 0 pass none further back; a Relu passes
// none since its input was <= 0): while those entries stay 0, a zero channel's gradient may be left out.
//
// Errors: ErrorKind::bad_input for a Conv weight or BatchNormalization parameter whose size does not
// match its channel count, naming the node and the tensor (see analyze_zero_channels).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hpcnn::nn {

// Entry `channel` along axis 0 of the parameter `tensor` (a Conv filter [Cin/group, k...], or one
// value of a bias, scale or BatchNormalization bias) must stay 0.
struct ZeroHolder {
  std::string tensor;
  int64_t channel = 0;
  std::string node;  // the node that reads it
  bool operator<(const ZeroHolder& o) const { return tensor != o.tensor ? tensor < o.tensor : channel < o.channel; }
};

class ZeroChannels {
 public:
  // Per channel of `value`: 1 where it is structurally zero; empty when no channel is known (an
  // unknown value, or one whose channels the rules do not follow).
  std::vector<char> zero(const std::string& value) const;
  // The parameter entries that keep the zero channels of `value` at zero (sorted, unique).
  std::vector<ZeroHolder> holders(const std::string& value) const;

  struct Entry {  // internal: how a value's channels were derived
    std::vector<char> zero;
    std::string op, node;
    std::vector<std::string> inputs;  // the activations it came from
    std::string weight, bias, scale;  // Conv: weight, bias; BatchNormalization: scale, bias
    std::vector<char> scale_zero;     // BatchNormalization: scale_c == 0
  };
  std::map<std::string, Entry> entries;
};

// Analyses the main graph of `model` (nodes in topological order, as ONNX requires; constants are
// initializers or Constant nodes). `origin` names the model in errors.
ZeroChannels analyze_zero_channels(const onnx::ModelProto& model, const std::string& origin);

}  // namespace hpcnn::nn
