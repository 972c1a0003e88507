// The operator facts table (onnx/op_facts.h): the channel rules and shape-like inputs that
// prune-rate's analysis had as string sets of its own (moved, not changed), the opset-dependent
// signatures, and lookups.
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>

#include "onnx/graph.h"
#include "onnx/op_facts.h"

using namespace hpcnn::onnxu;

namespace {

std::set<std::string> ops_with(Channels c) {
  std::set<std::string> out;
  for (const auto& f : all_op_facts())
    if (f.channels == c) out.insert(f.op_type);
  return out;
}

onnx::NodeProto node(const std::string& op, const std::string& domain = "") {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_domain(domain);
  return n;
}

// "name:kind@position" for the shape-like inputs of a signature (attributes at position -1).
std::vector<std::string> shape_inputs(const Signature& s) {
  auto kind = [](ShapeKind k) {
    switch (k) {
      case ShapeKind::sizes:
        return "sizes";
      case ShapeKind::broadcast:
        return "broadcast";
      case ShapeKind::factor:
        return "factor";
      case ShapeKind::roi:
        return "roi";
      case ShapeKind::reshape_target:
        return "reshape_target";
      case ShapeKind::axes:
        return "axes";
      case ShapeKind::output_axes:
        return "output_axes";
      case ShapeKind::pads:
        return "pads";
      case ShapeKind::none:
        break;
    }
    return "none";
  };
  std::vector<std::string> out;
  for (size_t i = 0; i < s.inputs.size(); ++i)
    if (s.inputs[i].role == Role::shape)
      out.push_back(std::string(s.inputs[i].name) + ":" + kind(s.inputs[i].shape) + "@" + std::to_string(i));
  for (const auto& a : s.attributes)
    if (a.role == Role::shape) out.push_back(std::string(a.name) + ":" + kind(a.shape) + "@-1");
  return out;
}

}  // namespace

TEST_CASE("op facts keep prune-rate's channel rules as they were", "[onnx][op_facts]") {
  // The former kPassThrough set plus the BatchNormalization/InstanceNormalization rule.
  CHECK(ops_with(Channels::pass_through) == std::set<std::string>{"Relu",
                                                                  "LeakyRelu",
                                                                  "Sigmoid",
                                                                  "Tanh",
                                                                  "Clip",
                                                                  "HardSigmoid",
                                                                  "HardSwish",
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
                                                                  "Erf",
                                                                  "Gelu",
                                                                  "Mish",
                                                                  "Celu",
                                                                  "ThresholdedRelu",
                                                                  "Floor",
                                                                  "Ceil",
                                                                  "Round",
                                                                  "Sign",
                                                                  "MaxPool",
                                                                  "AveragePool",
                                                                  "GlobalAveragePool",
                                                                  "GlobalMaxPool",
                                                                  "LpPool",
                                                                  "GlobalLpPool",
                                                                  "Dropout",
                                                                  "Identity",
                                                                  "LRN",
                                                                  "Cast",
                                                                  "Softmax",
                                                                  "LogSoftmax",
                                                                  "Upsample",
                                                                  "Resize",
                                                                  "MaxRoiPool",
                                                                  "Expand",
                                                                  "Tile",
                                                                  "BatchNormalization",
                                                                  "InstanceNormalization"});
  // The former kElementwise set.
  CHECK(ops_with(Channels::elementwise) ==
        std::set<std::string>{"Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "Mean", "Pow", "PRelu"});
  CHECK(ops_with(Channels::conv) == std::set<std::string>{"Conv"});
  CHECK(ops_with(Channels::dense) == std::set<std::string>{"Gemm", "MatMul"});
  CHECK(ops_with(Channels::concat) == std::set<std::string>{"Concat"});
  CHECK(ops_with(Channels::flatten) == std::set<std::string>{"Flatten", "Reshape"});
  CHECK(ops_with(Channels::squeeze) == std::set<std::string>{"Squeeze", "Unsqueeze"});
  CHECK(ops_with(Channels::reads_shape) == std::set<std::string>{"Shape"});

  // Per-channel operands: BatchNormalization's four, InstanceNormalization's two.
  const Signature* bn = find_signature(node("BatchNormalization"), 13);
  REQUIRE(bn);
  CHECK(bn->find(Role::per_channel) == 1);
  CHECK(bn->find(Role::per_channel, 2) == 2);
  CHECK(bn->find(Role::running_stat) == 3);
  CHECK(bn->find(Role::running_stat, 4) == 4);
  const Signature* in = find_signature(node("InstanceNormalization"), 13);
  REQUIRE(in);
  CHECK(in->inputs.size() == 3);
  CHECK(in->find(Role::per_channel) == 1);
  CHECK(in->find(Role::running_stat) == -1);
}

TEST_CASE("op facts keep the shape-like inputs the channel analysis knew, per opset", "[onnx][op_facts]") {
  auto at = [](const std::string& op, int64_t opset) {
    const Signature* s = find_signature(node(op), opset);
    return s ? shape_inputs(*s) : std::vector<std::string>{"(none)"};
  };
  using V = std::vector<std::string>;
  CHECK(at("Resize", 13) == V{"roi:roi@1", "scales:factor@2", "sizes:sizes@3"});
  CHECK(at("Resize", 11) == V{"roi:roi@1", "scales:factor@2", "sizes:sizes@3"});
  CHECK(at("Resize", 10) == V{"scales:factor@1"});
  CHECK(at("Resize", 9) == V{"(none)"});  // older than the analysis knows: fixed there
  CHECK(at("Resize", 18) == V{"roi:roi@1", "scales:factor@2", "sizes:sizes@3", "axes:axes@-1"});
  CHECK(at("Upsample", 9) == V{"scales:factor@1"});
  CHECK(at("Upsample", 8) == V{"scales:factor@-1"});
  CHECK(at("Expand", 8) == V{"shape:broadcast@1"});
  CHECK(at("Expand", 7) == V{"(none)"});
  CHECK(at("Tile", 7) == V{"repeats:factor@1"});
  CHECK(at("Reshape", 13) == V{"shape:reshape_target@1"});
  CHECK(at("Squeeze", 13) == V{"axes:axes@1"});
  CHECK(at("Squeeze", 12) == V{"axes:axes@-1"});
  CHECK(at("Unsqueeze", 11) == V{"axes:output_axes@-1"});
  CHECK(at("Pad", 10) == V{"pads:pads@-1"});
  CHECK(at("Pad", 11) == V{"pads:pads@1"});
  CHECK(at("Pad", 18) == V{"pads:pads@1", "axes:axes@3"});
  CHECK(at("ConstantOfShape", 13) == V{"input:sizes@0"});
  // Only the operators with shape-like inputs are refused at opsets older than their facts.
  CHECK(find_op_facts("", "Resize")->has_shape_inputs());
  CHECK_FALSE(find_op_facts("", "Gelu")->has_shape_inputs());
  CHECK_FALSE(find_op_facts("", "Gelu")->at(13));
}

TEST_CASE("op facts follow inputs that changed between opsets", "[onnx][op_facts]") {
  // Clip: min/max attributes before opset 11, inputs from 11.
  const Signature* clip10 = find_signature(node("Clip"), 10);
  const Signature* clip11 = find_signature(node("Clip"), 11);
  REQUIRE((clip10 && clip11));
  CHECK(clip10->inputs.size() == 1);
  CHECK(clip10->attributes.size() == 2);
  CHECK(clip11->input(1)->role == Role::scalar);
  CHECK(clip11->input(2)->role == Role::scalar);
  CHECK_FALSE(clip11->input(1)->differentiable);
  // Dropout: ratio attribute before 12, ratio and training_mode inputs from 12.
  CHECK(find_signature(node("Dropout"), 11)->attributes.at(0).name == std::string("ratio"));
  CHECK(find_signature(node("Dropout"), 11)->input(1) == nullptr);
  CHECK(find_signature(node("Dropout"), 12)->input(2)->name == std::string("training_mode"));
  // BatchNormalization: running statistics outputs from 14, saved batch statistics before.
  const Signature* bn13 = find_signature(node("BatchNormalization"), 13);
  const Signature* bn14 = find_signature(node("BatchNormalization"), 14);
  REQUIRE((bn13 && bn14));
  CHECK(bn13->outputs.size() == 5);
  CHECK(bn13->outputs[3].role == OutputRole::batch_stat);
  CHECK(bn14->outputs.size() == 3);
  CHECK(bn14->outputs[1].role == OutputRole::running_stat);
  CHECK(std::string(bn14->inputs[3].name) == "input_mean");
}

TEST_CASE("op facts: weights and their axes, transposition, variadic inputs, lookups", "[onnx][op_facts]") {
  onnx::NodeProto gemm = node("Gemm");
  const Signature* s = find_signature(gemm, 13);
  REQUIRE(s);
  const InputFact& b = s->inputs[s->find(Role::weight)];
  CHECK(node_axis(gemm, b, b.axis) == 1);
  CHECK(node_axis(gemm, b, b.in_axis) == 0);
  auto* t = gemm.add_attribute();
  t->set_name("transB");
  t->set_type(onnx::AttributeProto::INT);
  t->set_i(1);
  CHECK(node_axis(gemm, b, b.axis) == 0);
  CHECK(node_axis(gemm, b, b.in_axis) == 1);
  CHECK(node_axis(gemm, s->inputs[0], s->inputs[0].axis) == 1);  // transA unset
  const Signature* mm = find_signature(node("MatMul"), 13);
  CHECK(mm->inputs[1].axis == -1);
  CHECK(mm->inputs[1].in_axis == -2);
  const Signature* conv = find_signature(node("Conv"), 7);
  CHECK(conv->find(Role::weight) == 1);
  CHECK(conv->inputs[1].axis == 0);
  CHECK(conv->inputs[1].in_axis == 1);
  CHECK(conv->find(Role::bias) == 2);

  const Signature* sum = find_signature(node("Sum"), 13);
  CHECK(sum->input(7) == sum->input(0));
  CHECK(find_signature(node("Add"), 13)->input(2) == nullptr);
  CHECK(initializer_role(sum, 5, 1) == InitializerRole::constant);
  CHECK(initializer_role(sum, 5, 4) == InitializerRole::parameter);
  CHECK(gradient_flows(sum, 5));
  CHECK(initializer_role(find_signature(node("Concat"), 13), 3, 1) == InitializerRole::parameter);
  CHECK(initializer_role(find_signature(node("BatchNormalization"), 13), 3, 8) == InitializerRole::buffer);
  CHECK(initializer_role(nullptr, 0, 8) == InitializerRole::constant);

  CHECK(find_op_facts("ai.onnx", "Conv") == find_op_facts("", "Conv"));
  CHECK_FALSE(find_op_facts("com.microsoft", "Conv"));
  CHECK_FALSE(find_op_facts(node("Conv", "custom")));
  CHECK_FALSE(find_op_facts("", "NoSuchOp"));
}

TEST_CASE("op facts cover every operator the engine binds, at every opset it reads", "[onnx][op_facts]") {
  for (const char* op : {"Conv",
                         "BatchNormalization",
                         "Relu",
                         "LeakyRelu",
                         "Sigmoid",
                         "Clip",
                         "MaxPool",
                         "AveragePool",
                         "GlobalAveragePool",
                         "Gemm",
                         "MatMul",
                         "Add",
                         "Sub",
                         "Mul",
                         "Sum",
                         "Flatten",
                         "Reshape",
                         "Identity",
                         "Concat",
                         "Dropout",
                         "Softmax",
                         "Transpose",
                         "Pad",
                         "Shape",
                         "Gather",
                         "Unsqueeze",
                         "Squeeze",
                         "Cast",
                         "Constant",
                         "ConstantOfShape"})
    for (int64_t opset = 7; opset <= 21; ++opset) {
      INFO(op << " at opset " << opset);
      // ConstantOfShape came at opset 9 (the engine also binds it in older models; it has no
      // input that could be a parameter, as the table without facts says).
      CHECK((find_signature(node(op), opset) || (std::string(op) == "ConstantOfShape" && opset < 9)));
    }
}

TEST_CASE("op facts say which operators own subgraphs", "[onnx][op_facts]") {
  for (const auto& f : all_op_facts()) {
    INFO(f.op_type);
    const std::string op = f.op_type;
    CHECK(f.owns_subgraphs == (op == "If" || op == "Loop" || op == "Scan"));
  }
}
