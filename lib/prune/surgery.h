// hpcnn prune: graph surgery that makes the pruned model physically smaller.
//
// apply_pruning() removes the channels whose class is not kept: Conv weights and biases on their
// outputs and on their consumers' inputs, BatchNormalization scale/bias/mean/var, elementwise
// constants, Gemm/MatMul rows or columns (by channel x spatial position after Flatten/Reshape),
// depthwise Conv `group` attributes, and the channel entry of constant shape-like inputs (Reshape
// flatten targets, Resize `sizes`, Expand `shape`; a constant that other nodes also read gets a
// fresh copy under a new name). ConstantOfShape weights get a new shape. Shapes of graph inputs
// that list sliced initializers (IR version 3) are updated; when anything was removed, the
// then stale value_info entries are dropped. The model is changed in place, through
// onnxu::Graph's edits; with nothing removed it stays equal (as a protobuf message) to the input.
#pragma once

#include <onnx/onnx_pb.h>

#include <vector>

#include "prune/channel_graph.h"

namespace hpcnn::prune {

void apply_pruning(onnx::ModelProto& model, const ChannelGraph& cg, const std::vector<char>& kept);

}  // namespace hpcnn::prune
