#include "onnx/op_facts.h"

#include <unordered_map>

#include "onnx/graph.h"

namespace hpcnn::onnxu {
namespace {

// Builders for the table's entries.
InputFact data(const char* name, bool differentiable = true, int axis = kNoAxis, const char* transposed_by = nullptr) {
  InputFact f;
  f.name = name;
  f.differentiable = differentiable;
  f.axis = axis;
  f.transposed_by = transposed_by;
  return f;
}
// An operand of elementwise arithmetic: a scalar initializer is a constant.
InputFact operand(const char* name) {
  InputFact f = data(name);
  f.scalar_constant = true;
  return f;
}
InputFact with_role(const char* name, Role role, bool differentiable, int axis = kNoAxis) {
  InputFact f = data(name, differentiable, axis);
  f.role = role;
  return f;
}
InputFact weight(const char* name, int axis, int in_axis, const char* transposed_by = nullptr) {
  InputFact f = with_role(name, Role::weight, true, axis);
  f.in_axis = in_axis;
  f.transposed_by = transposed_by;
  return f;
}
InputFact bias(const char* name, int axis) { return with_role(name, Role::bias, true, axis); }
InputFact per_channel(const char* name) { return with_role(name, Role::per_channel, true, 0); }
InputFact running_stat(const char* name) { return with_role(name, Role::running_stat, false, 0); }
InputFact scalar(const char* name) { return with_role(name, Role::scalar, false); }
InputFact shape(const char* name, ShapeKind kind) {
  InputFact f = with_role(name, Role::shape, false);
  f.shape = kind;
  return f;
}

// Channel data (axis 1), differentiable: the first input of most CNN operators.
InputFact x(const char* name) { return data(name, true, 1); }

Signature sig(int64_t since, std::vector<InputFact> inputs, std::vector<AttrFact> attributes = {},
              std::vector<OutputFact> outputs = {}) {
  return {since, std::move(inputs), false, std::move(attributes), std::move(outputs)};
}
Signature variadic(int64_t since, InputFact each) { return {since, {each}, true, {}, {}}; }

// A unary operator whose output carries its input's channels.
OpFacts unary(const char* op, int64_t since = 1, const char* input = "X", bool differentiable = true) {
  return {op, Channels::pass_through, false, {sig(since, {data(input, differentiable, 1)})}};
}

std::vector<OpFacts> make_table() {
  using C = Channels;
  using S = ShapeKind;
  std::vector<OpFacts> t = {
      // ---- conv-like producers
      {"Conv", C::conv, false, {sig(1, {x("X"), weight("W", 0, 1), bias("B", 0)})}},
      {"Gemm", C::dense, false, {sig(1, {data("A", true, 1, "transA"), weight("B", 1, 0, "transB"), bias("C", -1)})}},
      // B's last axis holds the output features; A's features are its last axis.
      {"MatMul", C::dense, false, {sig(1, {data("A", true, -1), weight("B", -1, -2)})}},

      // ---- normalisation: per-channel parameters travel with the channels
      {"BatchNormalization",
       C::pass_through,
       false,
       {sig(14, {x("X"), per_channel("scale"), per_channel("B"), running_stat("input_mean"), running_stat("input_var")}, {},
            {{"Y", OutputRole::data}, {"running_mean", OutputRole::running_stat}, {"running_var", OutputRole::running_stat}}),
        sig(7, {x("X"), per_channel("scale"), per_channel("B"), running_stat("mean"), running_stat("var")}, {},
            {{"Y", OutputRole::data},
             {"mean", OutputRole::running_stat},
             {"var", OutputRole::running_stat},
             {"saved_mean", OutputRole::batch_stat},
             {"saved_var", OutputRole::batch_stat}})}},
      {"InstanceNormalization", C::pass_through, false, {sig(1, {x("input"), per_channel("scale"), per_channel("B")})}},

      // ---- channel-preserving operators with constant inputs
      {"Clip",
       C::pass_through,
       false,
       {sig(11, {x("input"), scalar("min"), scalar("max")}),
        sig(1, {x("input")}, {{"min", Role::scalar}, {"max", Role::scalar}})}},
      {"Dropout",
       C::pass_through,
       false,
       {sig(12, {x("data"), scalar("ratio"), scalar("training_mode")}, {},
            {{"output", OutputRole::data}, {"mask", OutputRole::mask}}),
        sig(1, {x("data")}, {{"ratio", Role::scalar}}, {{"output", OutputRole::data}, {"mask", OutputRole::mask}})}},
      {"Resize",
       C::pass_through,
       false,
       {sig(18, {x("X"), shape("roi", S::roi), shape("scales", S::factor), shape("sizes", S::sizes)},
            {{"axes", Role::shape, S::axes}}),
        sig(11, {x("X"), shape("roi", S::roi), shape("scales", S::factor), shape("sizes", S::sizes)}),
        sig(10, {x("X"), shape("scales", S::factor)})}},
      {"Upsample",
       C::pass_through,
       false,
       {sig(9, {x("X"), shape("scales", S::factor)}), sig(7, {x("X")}, {{"scales", Role::shape, S::factor}})}},
      {"Expand", C::pass_through, false, {sig(8, {x("input"), shape("shape", S::broadcast)})}},
      {"Tile", C::pass_through, false, {sig(6, {x("input"), shape("repeats", S::factor)})}},
      {"MaxPool", C::pass_through, false, {sig(1, {x("X")}, {}, {{"Y", OutputRole::data}, {"Indices", OutputRole::indices}})}},
      {"MaxRoiPool", C::pass_through, false, {sig(1, {x("X"), data("rois", false)})}},
      // The engine casts on the host as shape arithmetic: no gradient.
      unary("Cast", 1, "input", false),

      // ---- elementwise with numpy broadcasting
      {"Add", C::elementwise, false, {sig(1, {operand("A"), operand("B")})}},
      {"Sub", C::elementwise, false, {sig(1, {operand("A"), operand("B")})}},
      {"Mul", C::elementwise, false, {sig(1, {operand("A"), operand("B")})}},
      {"Div", C::elementwise, false, {sig(1, {operand("A"), operand("B")})}},
      {"Pow", C::elementwise, false, {sig(1, {operand("X"), operand("Y")})}},
      {"Sum", C::elementwise, false, {variadic(1, operand("data_0"))}},
      {"Max", C::elementwise, false, {variadic(1, operand("data_0"))}},
      {"Min", C::elementwise, false, {variadic(1, operand("data_0"))}},
      {"Mean", C::elementwise, false, {variadic(1, operand("data_0"))}},
      {"PRelu", C::elementwise, false, {sig(1, {x("X"), per_channel("slope")})}},

      // ---- layout
      {"Concat", C::concat, false, {variadic(1, data("inputs"))}},
      {"Flatten", C::flatten, false, {sig(1, {x("input")})}},
      {"Reshape",
       C::flatten,
       false,
       {sig(5, {x("data"), shape("shape", S::reshape_target)}),
        sig(1, {x("data")}, {{"shape", Role::shape, S::reshape_target}})}},
      // Squeeze/Unsqueeze: shape arithmetic in the engine (no gradient).
      {"Squeeze",
       C::squeeze,
       false,
       {sig(13, {data("data", false, 1), shape("axes", S::axes)}),
        sig(1, {data("data", false, 1)}, {{"axes", Role::shape, S::axes}})}},
      {"Unsqueeze",
       C::squeeze,
       false,
       {sig(13, {data("data", false, 1), shape("axes", S::output_axes)}),
        sig(1, {data("data", false, 1)}, {{"axes", Role::shape, S::output_axes}})}},
      {"Shape", C::reads_shape, false, {sig(1, {data("data", false)})}},
      {"Transpose", C::unfollowable, false, {sig(1, {data("data")})}},
      {"Pad",
       C::unfollowable,
       false,
       {sig(18, {data("data"), shape("pads", S::pads), scalar("constant_value"), shape("axes", S::axes)}),
        sig(11, {data("data"), shape("pads", S::pads), scalar("constant_value")}),
        sig(1, {data("data")}, {{"pads", Role::shape, S::pads}, {"value", Role::scalar}})}},
      // Gather: shape arithmetic in the engine (no gradient).
      {"Gather", C::unfollowable, false, {sig(1, {data("data", false), with_role("indices", Role::indices, false)})}},
      {"Constant", C::unfollowable, false, {sig(1, {})}},
      {"ConstantOfShape", C::unfollowable, false, {sig(9, {shape("input", S::sizes)})}},

      // ---- control flow: subgraphs
      {"If", C::unfollowable, true, {sig(1, {data("cond", false)})}},
      {"Loop", C::unfollowable, true, {{1, {data("M", false), data("cond", false), data("v_initial")}, true, {}, {}}}},
      {"Scan", C::unfollowable, true, {variadic(8, data("initial_state_and_scan_inputs"))}},
  };
  // Unary operators that keep the channels (elementwise per channel, spatial pooling,
  // normalisation within a channel, no-ops). LRN and Softmax over axis 1 mix neighbouring
  // channels; they keep the count, so pruning them is an approximation that the pruning error
  // already accepts. Floor, Ceil, Round and Sign are piecewise constant: no gradient.
  for (const char* op : {"Relu",
                         "LeakyRelu",
                         "Sigmoid",
                         "Tanh",
                         "HardSigmoid",
                         "Elu",
                         "Selu",
                         "Softplus",
                         "Softsign",
                         "Abs",
                         "Neg",
                         "Exp",
                         "Log",
                         "Sqrt",
                         "Reciprocal",
                         "AveragePool",
                         "GlobalAveragePool",
                         "GlobalMaxPool",
                         "LpPool",
                         "GlobalLpPool",
                         "LRN"})
    t.push_back(unary(op));
  t.push_back(unary("Erf", 9, "input"));
  t.push_back(unary("Gelu", 20));
  t.push_back(unary("Mish", 18));
  t.push_back(unary("Celu", 12));
  t.push_back(unary("HardSwish", 14));
  t.push_back(unary("ThresholdedRelu", 10));
  t.push_back(unary("Identity", 1, "input"));
  t.push_back(unary("Softmax", 1, "input"));
  t.push_back(unary("LogSoftmax", 1, "input"));
  for (const char* op : {"Floor", "Ceil", "Round", "Sign"}) t.push_back(unary(op, 1, "X", false));
  return t;
}

struct Table {
  std::vector<OpFacts> entries = make_table();
  std::unordered_map<std::string, const OpFacts*> by_op;
  Table() {
    for (const auto& e : entries) by_op.emplace(e.op_type, &e);
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

const InputFact* Signature::input(int i) const {
  if (i < 0 || inputs.empty()) return nullptr;
  if (i < static_cast<int>(inputs.size())) return &inputs[i];
  return variadic ? &inputs.back() : nullptr;
}

int Signature::find(Role role, int from) const {
  for (int i = from; i < static_cast<int>(inputs.size()); ++i)
    if (inputs[i].role == role) return i;
  return -1;
}

const Signature* OpFacts::at(int64_t opset) const {
  for (const auto& s : signatures)
    if (opset >= s.since) return &s;
  return nullptr;
}

bool OpFacts::has_shape_inputs() const {
  for (const auto& s : signatures) {
    if (s.find(Role::shape) >= 0) return true;
    for (const auto& a : s.attributes)
      if (a.role == Role::shape) return true;
  }
  return false;
}

const OpFacts* find_op_facts(const std::string& domain, const std::string& op_type) {
  if (!domain.empty() && domain != "ai.onnx") return nullptr;
  const auto& t = table();
  auto it = t.by_op.find(op_type);
  return it == t.by_op.end() ? nullptr : it->second;
}

const OpFacts* find_op_facts(const onnx::NodeProto& node) { return find_op_facts(node.domain(), node.op_type()); }

const Signature* find_signature(const onnx::NodeProto& node, int64_t opset) {
  const OpFacts* f = find_op_facts(node);
  return f ? f->at(opset) : nullptr;
}

const std::vector<OpFacts>& all_op_facts() { return table().entries; }

int node_axis(const onnx::NodeProto& node, const InputFact& f, int axis) {
  if (axis == kNoAxis || !f.transposed_by || attr_int(node, f.transposed_by, 0) == 0) return axis;
  return axis >= 0 ? 1 - axis : -3 - axis;
}

bool gradient_flows(const Signature* sig, int i) {
  const InputFact* f = sig ? sig->input(i) : nullptr;
  return f && f->differentiable;
}

InitializerRole initializer_role(const Signature* sig, int i, int64_t numel) {
  const InputFact* f = sig ? sig->input(i) : nullptr;
  if (!f) return InitializerRole::constant;
  if (f->role == Role::running_stat) return InitializerRole::buffer;
  if (f->differentiable && !(f->scalar_constant && numel <= 1)) return InitializerRole::parameter;
  return InitializerRole::constant;
}

}  // namespace hpcnn::onnxu
