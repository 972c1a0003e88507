// hpcnn prune: structured pruning that masks instead of removing (prune-rate --mask-channels).
//
// apply_channel_mask() takes the same kept-channel decision as apply_pruning() (surgery.h: the
// channel classes of prune/channel_graph.h, residual-tied channels as one class) but keeps every
// shape: for each prunable layer (Conv, Gemm, MatMul with a constant weight) and each output
// channel whose class is not kept,
//   - the filter (the weight's slice along the layer's output axis: axis 0 of a Conv weight
//     [Cout, Cin/group, k...]) becomes 0, and the bias entry (Conv / Gemm input 2, when it has one
//     value per output channel) becomes 0;
//   - every BatchNormalization that reads the layer's output directly (its input 0) gets scale 0
//     and bias 0 for that channel (mean and var stay).
// The channel is then exactly zero at the layer's output and after that BatchNormalization, in
// training mode (the normalised zero times scale 0, plus bias 0) and inference mode alike, and
// stays zero after Relu, MaxPool and the other channel-wise ops (nn/zero_channels.h finds them).
// A BatchNormalization that follows the layer only through another op (Conv -> Relu -> BN) is
// left alone: its channel is zero only if its running statistics make it so.
// Errors: ErrorKind::unsupported for a weight, bias or BatchNormalization parameter that is not a
// FLOAT initializer or Constant node (ConstantOfShape included), naming the node and the tensor;
// ErrorKind::bad_input when its size disagrees with the channel analysis.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "prune/channel_graph.h"

namespace hpcnn::prune {

struct MaskedTensor {
  std::string node;               // the node that reads it (the layer, or its BatchNormalization)
  std::string tensor;             // the constant zeroed
  int axis = 0;                   // the channel axis in the tensor
  std::vector<int64_t> channels;  // zeroed channels, ascending
};

// Zeroes the removed channels' filters, biases and BatchNormalization scale and bias in place
// (see above); `kept` as kept_classes() (rates.h) gives it. Returns what was zeroed, in node order.
std::vector<MaskedTensor> apply_channel_mask(onnx::ModelProto& model, const ChannelGraph& cg, const std::vector<char>& kept);

}  // namespace hpcnn::prune
