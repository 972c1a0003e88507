// The training engine's input classification, which comes from the operator facts
// (onnx/op_facts.h): for every operator the engine binds, one hand-made node per case with
// initializers at its inputs, and the parameters and buffers nn::Model makes of them. The
// expectations are what the engine did before the facts moved into the table (each layer's
// differentiable_input / trainable_input / buffer_input; this file also passes against that
// code), so a change of the table that changes the engine's behaviour fails here.
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "nn/model.h"
#include "onnx/tensor.h"

using namespace hpcnn;

namespace {

// One node input: a runtime graph input ("x": fp32 of `dims`), a float initializer ("w"), an
// int64 initializer ("i": `dims` are its values), a bool initializer ("b"), or omitted ("").
struct In {
  std::string kind;
  std::vector<int64_t> dims;
};

struct Attr {
  std::string name;
  std::vector<int64_t> ints;  // one element and !list: an INT
  bool list = false;
  float f = 0;
  bool is_float = false;
};

Attr ints(const std::string& name, std::vector<int64_t> v) { return {name, std::move(v), true}; }
Attr one(const std::string& name, int64_t v) { return {name, {v}, false}; }
Attr flt(const std::string& name, float v) { return {name, {}, false, v, true}; }

onnx::ModelProto node_model(const std::string& op, int64_t opset, const std::vector<In>& inputs,
                            const std::vector<Attr>& attrs = {}, int outputs = 1) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name(op);
  auto* nd = g->add_node();
  nd->set_op_type(op);
  nd->set_name("n");
  for (size_t k = 0; k < inputs.size(); ++k) {
    const In& in = inputs[k];
    const std::string name = in.kind.empty() ? "" : "in" + std::to_string(k);
    nd->add_input(name);
    if (in.kind == "x") {
      auto* v = g->add_input();
      v->set_name(name);
      auto* tt = v->mutable_type()->mutable_tensor_type();
      tt->set_elem_type(onnx::TensorProto::FLOAT);
      for (int64_t d : in.dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
    } else if (in.kind == "w") {
      auto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::FLOAT);
      for (int64_t d : in.dims) t->add_dims(d);
      for (int64_t i = 0; i < onnxu::numel(in.dims); ++i) t->add_float_data(0.5f + static_cast<float>(i));
    } else if (in.kind == "i") {
      *g->add_initializer() = onnxu::make_int64_tensor(name, in.dims);
    } else if (in.kind == "b") {
      auto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::BOOL);
      t->add_int32_data(1);
    }
  }
  for (const Attr& a : attrs) {
    auto* p = nd->add_attribute();
    p->set_name(a.name);
    if (a.is_float) {
      p->set_type(onnx::AttributeProto::FLOAT);
      p->set_f(a.f);
    } else if (a.list) {
      p->set_type(onnx::AttributeProto::INTS);
      for (int64_t v : a.ints) p->add_ints(v);
    } else {
      p->set_type(onnx::AttributeProto::INT);
      p->set_i(a.ints.at(0));
    }
  }
  for (int o = 0; o < outputs; ++o) {
    nd->add_output("out" + std::to_string(o));
    g->add_output()->set_name("out" + std::to_string(o));
  }
  return m;
}

struct Roles {
  std::set<std::string> parameters, buffers;
};

Roles roles_of(const onnx::ModelProto& m) {
  nn::Model model(m, m.graph().name());
  Roles r;
  for (const auto& p : model.parameters()) r.parameters.insert(p.name);
  for (const auto& b : model.buffers()) r.buffers.insert(b.name);
  return r;
}

struct Case {
  std::string op;
  int64_t opset;
  std::vector<In> inputs;
  std::vector<Attr> attrs;
  std::set<std::string> parameters, buffers;
  int outputs = 1;
};

}  // namespace

TEST_CASE("the engine makes parameters, buffers and constants of the same inputs as before", "[onnx][op_facts][nn]") {
  const In x{"x", {1, 2, 4, 4}}, x2{"x", {2, 3}};
  const In scalar{"w", {}}, one_elem{"w", {1}};
  const std::vector<Case> cases = {
      {"Conv", 13, {x, {"w", {3, 2, 1, 1}}, {"w", {3}}}, {}, {"in1", "in2"}, {}},
      {"Conv", 7, {{"w", {1, 2, 4, 4}}, {"w", {3, 2, 1, 1}}}, {}, {"in0", "in1"}, {}},
      {"BatchNormalization", 7, {x, {"w", {2}}, {"w", {2}}, {"w", {2}}, {"w", {2}}}, {}, {"in1", "in2"}, {"in3", "in4"}},
      {"BatchNormalization", 13, {x, {"w", {2}}, {"w", {2}}, {"w", {2}}, {"w", {2}}}, {}, {"in1", "in2"}, {"in3", "in4"}},
      {"BatchNormalization",
       15,
       {{"w", {1, 2, 2, 2}}, {"w", {2}}, {"w", {2}}, {"w", {2}}, {"w", {2}}},
       {},
       {"in0", "in1", "in2"},
       {"in3", "in4"}},
      {"Relu", 13, {{"w", {2, 3}}}, {}, {"in0"}, {}},
      {"LeakyRelu", 13, {{"w", {2, 3}}}, {}, {"in0"}, {}},
      {"Sigmoid", 13, {{"w", {2, 3}}}, {}, {"in0"}, {}},
      {"Clip", 13, {x2, scalar, scalar}, {}, {}, {}},
      {"Clip", 13, {{"w", {4}}, scalar, {"", {}}}, {}, {"in0"}, {}},
      {"Clip", 9, {{"w", {4}}}, {flt("min", 0), flt("max", 1)}, {"in0"}, {}},
      {"MaxPool", 13, {{"w", {1, 1, 2, 2}}}, {ints("kernel_shape", {1, 1})}, {"in0"}, {}},
      {"AveragePool", 13, {{"w", {1, 1, 2, 2}}}, {ints("kernel_shape", {1, 1})}, {"in0"}, {}},
      {"GlobalAveragePool", 13, {{"w", {1, 1, 2, 2}}}, {}, {"in0"}, {}},
      {"Gemm", 13, {{"x", {1, 4}}, {"w", {4, 3}}, {"w", {3}}}, {}, {"in1", "in2"}, {}},
      {"Gemm", 13, {{"w", {1, 4}}, {"w", {3, 4}}, scalar}, {one("transB", 1)}, {"in0", "in1", "in2"}, {}},
      {"MatMul", 13, {{"w", {2, 3}}, {"w", {3, 2}}}, {}, {"in0", "in1"}, {}},
      {"Add", 13, {x2, {"w", {3}}}, {}, {"in1"}, {}},
      {"Add", 13, {x2, scalar}, {}, {}, {}},
      {"Sub", 13, {one_elem, {"w", {2, 3}}}, {}, {"in1"}, {}},
      {"Mul", 13, {{"w", {2, 3}}, one_elem}, {}, {"in0"}, {}},
      {"Sum", 13, {x2, {"w", {3}}, scalar, one_elem}, {}, {"in1"}, {}},
      {"Flatten", 13, {{"w", {2, 3}}}, {}, {"in0"}, {}},
      {"Reshape", 13, {{"w", {2, 3}}, {"i", {3, 2}}}, {}, {"in0"}, {}},
      {"Identity", 13, {{"w", {2, 3}}}, {}, {"in0"}, {}},
      {"Concat", 13, {{"x", {2}}, one_elem, {"w", {3}}}, {one("axis", 0)}, {"in1", "in2"}, {}},
      {"Dropout", 13, {x2, scalar, {"b", {}}}, {}, {}, {}},
      {"Dropout", 13, {{"w", {2, 3}}, scalar}, {}, {"in0"}, {}},
      {"Dropout", 10, {{"w", {2, 3}}}, {flt("ratio", 0.25f)}, {"in0"}, {}},
      {"Softmax", 13, {{"w", {2, 3}}}, {}, {"in0"}, {}},
      {"Transpose", 13, {{"w", {2, 3}}}, {ints("perm", {1, 0})}, {"in0"}, {}},
      {"Pad", 13, {{"w", {2, 2}}, {"i", {1, 1, 1, 1}}, scalar}, {}, {"in0"}, {}},
      {"Pad", 10, {{"w", {2, 2}}}, {ints("pads", {1, 1, 1, 1}), flt("value", 2)}, {"in0"}, {}},
      {"Unsqueeze", 13, {{"w", {3}}, {"i", {0}}}, {}, {}, {}},
      {"Squeeze", 13, {{"w", {1, 3}}, {"i", {0}}}, {}, {}, {}},
      {"Unsqueeze", 11, {{"w", {3}}}, {ints("axes", {0})}, {}, {}},
      {"Cast", 13, {{"w", {3}}}, {one("to", onnx::TensorProto::FLOAT)}, {}, {}},
      {"Shape", 13, {{"w", {2, 3}}}, {}, {}, {}},
      {"Gather", 13, {{"w", {3}}, {"i", {1}}}, {}, {}, {}},
      {"ConstantOfShape", 13, {{"i", {2, 3}}}, {}, {}, {}},
      {"ConstantOfShape", 8, {{"i", {2, 3}}}, {}, {}, {}},
  };
  for (const Case& c : cases) {
    INFO(c.op << " at opset " << c.opset << " with " << c.inputs.size() << " inputs");
    const Roles r = roles_of(node_model(c.op, c.opset, c.inputs, c.attrs, c.outputs));
    CHECK(r.parameters == c.parameters);
    CHECK(r.buffers == c.buffers);
  }
}

TEST_CASE("gradients reach the differentiable inputs the engine had, scalars included", "[onnx][op_facts][nn]") {
  // Add's scalar operand is a constant when it is an initializer, but gradients flow to it.
  onnx::ModelProto m = node_model("Add", 13, {{"x", {2, 3}}, {"x", {}}});
  nn::ModelOptions o;
  o.input_grads = true;
  nn::Model model(m, "add", o);
  model.forward({Tensor::full({2, 3}, 1.0f), Tensor::full({}, 2.0f)}, nn::Mode::training);
  model.backward({Tensor::full({2, 3}, 1.0f)});
  REQUIRE(model.input_grads().size() == 2);
  CHECK(model.input_grads()[1].data()[0] == 6.0f);
  CHECK(model.input_grads()[0].data()[5] == 1.0f);

  // Concat passes gradients to every input; Pad only to its data.
  onnx::ModelProto c = node_model("Concat", 13, {{"x", {2}}, {"x", {3}}}, {one("axis", 0)});
  nn::Model concat(c, "concat", o);
  concat.forward({Tensor::full({2}, 1.0f), Tensor::full({3}, 1.0f)}, nn::Mode::training);
  concat.backward({Tensor::full({5}, 1.0f)});
  CHECK(concat.input_grads()[0].data()[1] == 1.0f);
  CHECK(concat.input_grads()[1].data()[2] == 1.0f);
}
