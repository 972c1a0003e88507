// hpcnn prune: channel dependency analysis for structured pruning.
//
// Every prunable layer -- Conv (output filters, weight [Cout, Cin/group, kH, kW] axis 0, or
// [Cout, Cin/group, kD, kH, kW] for a 3-D convolution on NCDHW: the L1 norm spans the whole kernel), Gemm
// (output neurons, B axis 0 with transB=1, axis 1 with transB=0) and MatMul with a constant 2-D
// B [K, N] (axis 1) -- gets one channel id per output channel. Ids travel with the tensors along
// axis 1 (NCHW channels, or features of [N, F]) through channel-preserving operators; an
// elementwise Add/Sum/Sub/Mul/Max/... of two carried tensors unites their ids (residual
// connections), a depthwise Conv unites its filters with its input channels, Concat on axis 1
// concatenates them, and Flatten/Reshape to [N, C*H*W] repeats each id over the spatial size so
// that the next Gemm/MatMul's weight columns can be sliced "by channel x spatial position" (any
// spatial rank: a channel of an NCDHW map owns D*H*W consecutive columns).
// Which rule applies to a node, and which of its inputs are weights, biases, per-channel
// parameters or shape-like constants, come from the operator facts (onnx/op_facts.h).
// Operators with shape-like inputs (Resize sizes/scales/roi, Upsample scales, Expand shape, Tile
// repeats) are followed only when those inputs are constant
// and leave the channel axis alone (scale or repeat 1) or name the channel count (rewritten to
// the kept count, as the flatten target of a Reshape is).
// An elementwise operand computed from a constant by a node that only adds unit axes
// (Unsqueeze(scale [C], axes [1, 2]) -> Mul, as some Caffe2 exports write a scale layer; or a
// Reshape to [1, C, 1, 1]) is followed to that constant, which is sliced (a Reshape target naming
// C is rewritten). A channel shuffle (Reshape [N, C, H, W] -> [N, g, C/g, H, W], Transpose
// [0, 2, 1, 3, 4], Reshape -> [N, C, H, W]) is followed as a permutation of the channels; channel j
// of each of the g groups is united with channel j of the others, so the groups stay equal.
// United ids form one channel class: a class is kept or removed as a whole. Layers that share
// a class form a group with one kept-channel set (Sakai et al., ICPR 2022, Sec. 3, applied per
// group). A class is fixed (never removed) if its channels reach a graph output, are read
// inside a subgraph (If/Loop/Scan: the subgraph is not sliced), have their count read by Shape,
// or pass through an operator the analysis cannot follow; the reason is recorded and reported.
//
// The analysis also records every slicing the pruned model needs (SliceAction), the Conv
// `group` attributes to adjust, and the shape-like constants to rewrite.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "onnx/graph.h"
#include "onnx/shapes.h"

namespace hpcnn::prune {

struct Layer {
  int node = -1;
  std::string name;           // node name, or its first output's name when the node has none
  std::string op;             // Conv, Gemm, MatMul
  onnxu::ConstantRef weight;  // the weight tensor
  int weight_axis = 0;        // axis of the output channels in the weight
  int64_t channels = 0;
  int64_t weight_numel = 0;
  std::vector<int> ids;    // channel id of each output channel
  std::vector<double> l1;  // L1 norm of each output filter / neuron
  int group = -1;          // index into ChannelGraph::groups
};

struct Group {
  std::vector<int> layers;    // indices into ChannelGraph::layers
  std::vector<int> classes;   // channel classes (root ids), in order of first appearance
  std::vector<double> score;  // per class: sum of the members' filter L1 norms
  int64_t weight_numel = 0;   // sum over members
  std::string fixed_reason;   // non-empty: the group is not pruned, and why
};

// Keep the indices along `axis` of constant `value` whose channel id is kept.
struct SliceAction {
  std::string value;
  int axis = 0;
  std::vector<int> ids;  // channel id per index along the axis
};

// Set the Conv node's `group` attribute to the number of its kept ids (depthwise Conv).
struct GroupAttrAction {
  int node = -1;
  std::vector<int> ids;
};

// Rewrite entry `index` of the node's constant shape-like input `input` (a Reshape flatten
// target, Resize `sizes`, Expand `shape`) to the number of kept ids.
struct ShapeAction {
  int node = -1;
  int input = 1;
  int index = 1;
  std::vector<int> ids;  // ids of the channels (of the flattened features, for a Reshape)
};

class ChannelGraph {
 public:
  std::vector<Layer> layers;
  std::vector<Group> groups;
  std::vector<SliceAction> slices;
  std::vector<GroupAttrAction> group_attrs;
  std::vector<ShapeAction> shape_inputs;

  int id_count() const { return static_cast<int>(parent_.size()); }
  int root(int id) const;

  // Internal construction API (used by analyze_channels).
  std::vector<int> new_ids(int64_t n);
  void unite(int a, int b);
  void fix(int id, const std::string& reason);
  const std::string& fixed_reason_of_root(int root) const { return fixed_[root]; }
  void finalize_fixed();  // moves fixed reasons onto roots

 private:
  mutable std::vector<int> parent_;
  std::vector<std::string> fixed_;
};

// Analyses `model` (validated by `view`); `shapes` from onnxu::infer_shapes.
// Layers' L1 norms are computed here. Errors: ErrorKind::bad_input for inconsistent weights.
ChannelGraph analyze_channels(const onnx::ModelProto& model, const onnxu::GraphView& view, const onnxu::ShapeMap& shapes);

// Per-channel L1 norms of a constant weight along `axis` (ConstantOfShape: closed form).
std::vector<double> constant_l1_norms(const onnxu::GraphView& view, const onnxu::ConstantRef& ref, int axis);

}  // namespace hpcnn::prune
