// hpcnn onnx: one table of operator facts for the default ONNX domain ("" or "ai.onnx"), read by
// every graph transform instead of string switches of their own: the training engine's loader
// (nn/model.cpp: which initializers are parameters, buffers or constants, which inputs pass
// gradients), prune-rate's channel analysis, surgery and check (prune/), and sparsify-fcl.
//
// Per operator (OpFacts): how channels flow through it for structured pruning (Channels, Sakai
// et al., ICPR 2022, Sec. 3: which layers share a kept-channel set), whether it owns subgraphs,
// and one Signature per opset range in which its inputs stayed the same (newest first: Resize
// 10 vs 11+, Upsample 7 vs 9, Dropout's ratio attribute vs input at 12, Clip's min/max
// attributes vs inputs at 11, Pad at 2/11/18, Squeeze/Unsqueeze axes at 13, BatchNormalization's
// outputs at 14). A Signature lists, per input position, its role (InputFact), the attributes
// that held constants before they became inputs (AttrFact), and the outputs (OutputFact).
// Lists older than opset 7 (the oldest the toolkit reads, onnx/model.h) are folded into the
// oldest entry.
//
// `differentiable` is the engine's fact (nn/): ONNX's differentiability mark, except that the
// engine evaluates Shape, Gather, Squeeze, Unsqueeze and Cast as host-side shape arithmetic and
// passes no gradient through them (marked where it applies).
//
// Lookups never throw: an operator outside the table (or of another domain) has no facts, and
// every transform treats it as opaque (Channels::unfollowable, no parameters).
#pragma once

#include <onnx/onnx_pb.h>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

namespace hpcnn::onnxu {

// What an input (or attribute) holds.
enum class Role {
  data,          // an activation or data operand
  weight,        // the weights of a conv-like operator (Conv W, Gemm B, MatMul B): `axis` holds the
                 // output channels, `in_axis` the input channels (Conv: per group)
  bias,          // one value per output channel of a conv-like operator (Conv B, Gemm C), along `axis`
  per_channel,   // one parameter per channel of the data along axis 0 (BatchNormalization and
                 // InstanceNormalization scale/B; PRelu slope, broadcast)
  running_stat,  // BatchNormalization running mean/variance: state updated in training (a buffer)
  shape,         // a shape-like constant; `shape` says which kind
  scalar,        // a non-differentiable scalar constant (Clip min/max, Dropout ratio and
                 // training_mode, Pad constant value)
  indices,       // integer indices into the data (Gather)
};

// The kind of a shape-like constant (Role::shape), one entry per axis unless said otherwise.
enum class ShapeKind {
  none,
  sizes,           // output extent per axis (Resize sizes, ConstantOfShape shape)
  broadcast,       // target shape, numpy-broadcast against the input, aligned at the last axis (Expand)
  factor,          // multiplier per axis (Resize/Upsample scales, Tile repeats)
  roi,             // Resize roi: starts then ends per axis (read only by tf_crop_and_resize)
  reshape_target,  // Reshape shape: 0 copies the input's dim, -1 is inferred
  axes,            // axes of the input (Squeeze, Pad)
  output_axes,     // axes of the output (Unsqueeze)
  pads,            // begins then ends per axis (Pad)
};

inline constexpr int kNoAxis = INT_MIN;

struct InputFact {
  const char* name = "";  // the input's name in the operator schema
  Role role = Role::data;
  bool differentiable = false;  // gradients flow to it (see the note above)
  ShapeKind shape = ShapeKind::none;
  // data: its channel (feature) axis; weight: its output-channel axis; bias, per_channel,
  // running_stat: the axis along the channels. Negative: from the end. kNoAxis: none.
  int axis = kNoAxis;
  int in_axis = kNoAxis;  // weight: the axis that matches the data's channels
  // A 2-D input whose two axes swap when this INT attribute is non-zero (Gemm transA/transB).
  const char* transposed_by = nullptr;
  // A one-element initializer here is a constant (a normalisation factor), not a parameter
  // (operands of elementwise arithmetic).
  bool scalar_constant = false;
};

// A constant held in an attribute (in the opsets before it became an input).
struct AttrFact {
  const char* name;
  Role role;
  ShapeKind shape = ShapeKind::none;
};

enum class OutputRole {
  data,
  running_stat,  // BatchNormalization (training mode) running mean/variance after the batch
  batch_stat,    // BatchNormalization (before opset 14) saved mean/variance of the batch
  mask,          // Dropout mask
  indices,       // MaxPool argmax indices
};

struct OutputFact {
  const char* name;
  OutputRole role;
};

struct Signature {
  int64_t since;                     // first opset version with this input list
  std::vector<InputFact> inputs;     // by position
  bool variadic = false;             // the last input repeats (Concat, Sum, ...)
  std::vector<AttrFact> attributes;  // attribute-held constants
  std::vector<OutputFact> outputs;   // by position

  // Facts of input position i (variadic: the last entry repeats), or nullptr.
  const InputFact* input(int i) const;
  // The first input position at or after `from` with `role`; -1 if none.
  int find(Role role, int from = 0) const;
};

// How the channels of input 0 (axis 1: NCHW channels, or features of [N, F]) reach the output
// (prune/channel_graph.h applies these rules).
enum class Channels {
  unfollowable,  // the analysis cannot follow channels through it: they are kept whole
  conv,          // Conv: each output channel is a filter (weight axis 0); groups tie channels
  dense,         // Gemm, MatMul with constant B: each output feature is a neuron of B
  pass_through,  // output 0 carries input 0's channels; per-channel inputs are sliced with
                 // them, shape-like inputs must leave the channel axis alone
  elementwise,   // numpy broadcasting over the inputs: carried channels are united
  concat,        // concatenation (along `axis`; followed on axis 1)
  flatten,       // Flatten (axis 1), Reshape to [N, C*H*W]: each channel becomes H*W features
  squeeze,       // Squeeze/Unsqueeze: followed when the axes leave axes 0 and 1 alone
  reads_shape,   // Shape: reads the channel count (which the pruning would change)
};

struct OpFacts {
  const char* op_type;
  Channels channels = Channels::unfollowable;
  bool owns_subgraphs = false;        // graph attributes (If branches, Loop/Scan bodies)
  std::vector<Signature> signatures;  // newest first

  // The signature in force at `opset`; nullptr when `opset` is older than the oldest.
  const Signature* at(int64_t opset) const;
  // Whether some signature has a shape-like input or attribute.
  bool has_shape_inputs() const;
};

// The facts of an operator; nullptr for operators outside the table or of another domain.
const OpFacts* find_op_facts(const std::string& domain, const std::string& op_type);
const OpFacts* find_op_facts(const onnx::NodeProto& node);
// The signature of `node` at the model's default-domain `opset`; nullptr if none.
const Signature* find_signature(const onnx::NodeProto& node, int64_t opset);
// Every entry of the table, in table order.
const std::vector<OpFacts>& all_op_facts();

// Fact axis `axis` (InputFact::axis or in_axis) of `node`'s input with facts `f`, with the two
// axes of a 2-D input swapped when `f.transposed_by` is set on the node (0 <-> 1, -1 <-> -2).
// kNoAxis stays kNoAxis; negative axes stay negative (resolve them against the rank).
int node_axis(const onnx::NodeProto& node, const InputFact& f, int axis);

// --- the training engine's view (nn/model.cpp) ---------------------------------------------
// Whether gradients flow to input i of an operator with signature `sig` (nullptr: none).
bool gradient_flows(const Signature* sig, int i);

enum class InitializerRole { parameter, buffer, constant };
// What a floating-point initializer with `numel` elements at input i is: a buffer
// (running_stat), a parameter (a differentiable input, unless a scalar where scalar_constant
// says so), or a constant (everything else: Clip bounds, Dropout ratio, Pad value, ...).
InitializerRole initializer_role(const Signature* sig, int i, int64_t numel);

}  // namespace hpcnn::onnxu
