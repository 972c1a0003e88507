#include <catch2/catch.hpp>

#include "core/error.h"
#include "onnx/graph.h"
#include "prune/verify.h"

using namespace hpcnn;
using namespace hpcnn::prune;
using onnxu::Dims;

namespace {

void add_value(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name, int32_t dtype,
               const Dims& dims) {
  auto* v = list->Add();
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(dtype);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

// A FLOAT initializer with dims only: shape inference and the checks need no values.
void add_weight(onnx::GraphProto& g, const std::string& name, const Dims& dims) {
  auto* t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
}

onnx::NodeProto* add_node(onnx::GraphProto& g, const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
                          const std::string& name) {
  auto* n = g.add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (auto& i : ins) n->add_input(i);
  for (auto& o : outs) n->add_output(o);
  return n;
}

void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void set_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

onnx::ModelProto model_of(onnx::GraphProto g) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(13);
  *m.mutable_graph() = std::move(g);
  return m;
}

// The model of the Resize fault: x [1,3,8,8] -> Conv c1 (`kept` filters) -> Relu -> Resize to
// the constant sizes [1, sizes_c, 16, 16] -> Conv c2 (`out_c` filters of `kept` channels) -> y.
onnx::ModelProto resize_model(int64_t kept, int64_t sizes_c, int64_t out_c = 4) {
  onnx::GraphProto g;
  g.set_name("resize");
  add_value(g.mutable_input(), "x", onnx::TensorProto::FLOAT, {1, 3, 8, 8});
  add_value(g.mutable_output(), "y", onnx::TensorProto::FLOAT, {1, 4, 16, 16});  // declared: set aside
  add_weight(g, "c1.weight", {kept, 3, 3, 3});
  add_weight(g, "c2.weight", {out_c, kept, 3, 3});
  *g.add_initializer() = onnxu::make_int64_tensor("sizes", {1, sizes_c, 16, 16});
  set_ints(add_node(g, "Conv", {"x", "c1.weight"}, {"c1"}, "c1"), "pads", {1, 1, 1, 1});
  add_node(g, "Relu", {"c1"}, {"r1"}, "relu1");
  add_node(g, "Resize", {"r1", "", "", "sizes"}, {"up"}, "up");
  set_ints(add_node(g, "Conv", {"up", "c2.weight"}, {"y"}, "c2"), "pads", {1, 1, 1, 1});
  return model_of(std::move(g));
}

// x [1,3,4,4] -> Conv c (conv_out filters) -> BatchNormalization (bn_c parameters) -> Flatten ->
// Gemm fc (B [10, gemm_k], transB) -> MatMul mm (B [mm_k, 2]) -> y.
onnx::ModelProto chain_model(int64_t conv_out, int64_t bn_c, int64_t gemm_k, int64_t mm_k) {
  onnx::GraphProto g;
  g.set_name("chain");
  add_value(g.mutable_input(), "x", onnx::TensorProto::FLOAT, {1, 3, 4, 4});
  add_value(g.mutable_output(), "y", onnx::TensorProto::FLOAT, {});
  add_weight(g, "c.weight", {conv_out, 3, 3, 3});
  for (const char* p : {"bn.scale", "bn.bias", "bn.mean", "bn.var"}) add_weight(g, p, {bn_c});
  add_weight(g, "fc.weight", {10, gemm_k});
  add_weight(g, "mm.weight", {mm_k, 2});
  set_ints(add_node(g, "Conv", {"x", "c.weight"}, {"c"}, "c"), "pads", {1, 1, 1, 1});
  add_node(g, "BatchNormalization", {"c", "bn.scale", "bn.bias", "bn.mean", "bn.var"}, {"bn"}, "bn");
  add_node(g, "Flatten", {"bn"}, {"flat"}, "flat");
  set_int(add_node(g, "Gemm", {"flat", "fc.weight"}, {"fc"}, "fc"), "transB", 1);
  add_node(g, "MatMul", {"fc", "mm.weight"}, {"y"}, "mm");
  return model_of(std::move(g));
}

// x -> Conv c (6 filters) -> If(cond): then Conv t (weight [2, then_cin, 3, 3]), else Conv e
// (weight [2, 6, 3, 3]); both read the main graph's Conv output and weights.
onnx::ModelProto if_model(int64_t then_cin) {
  onnx::GraphProto g;
  g.set_name("main");
  add_value(g.mutable_input(), "x", onnx::TensorProto::FLOAT, {1, 3, 4, 4});
  add_value(g.mutable_input(), "cond", onnx::TensorProto::BOOL, {});
  add_value(g.mutable_output(), "y", onnx::TensorProto::FLOAT, {});
  add_weight(g, "c.weight", {6, 3, 3, 3});
  add_weight(g, "t.weight", {2, then_cin, 3, 3});
  add_weight(g, "e.weight", {2, 6, 3, 3});
  set_ints(add_node(g, "Conv", {"x", "c.weight"}, {"c"}, "c"), "pads", {1, 1, 1, 1});
  auto* node = add_node(g, "If", {"cond"}, {"y"}, "if");
  for (const char* branch : {"then", "else"}) {
    auto* a = node->add_attribute();
    a->set_name(std::string(branch) + "_branch");
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto& b = *a->mutable_g();
    b.set_name(branch);
    const std::string conv = branch[0] == 't' ? "t" : "e";
    add_value(b.mutable_output(), conv + ".out", onnx::TensorProto::FLOAT, {});
    set_ints(add_node(b, "Conv", {"c", conv + ".weight"}, {conv + ".out"}, conv), "pads", {1, 1, 1, 1});
  }
  return model_of(std::move(g));
}

// The message of the Error verify_pruned throws (checking its kind), or "" when it passes.
std::string failure(const onnx::ModelProto& pruned, const onnxu::ShapeMap& original) {
  try {
    verify_pruned(pruned, original);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::unsupported);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("verify_pruned catches a Resize whose sizes still name the removed channels", "[prune]") {
  const auto original = onnxu::infer_shapes(resize_model(8, 8), /*declared_outputs=*/false);
  REQUIRE(original.at("y") == Dims{1, 4, 16, 16});
  CHECK(failure(resize_model(8, 8), original).empty());
  CHECK(failure(resize_model(5, 5), original).empty());  // 3 channels removed, sizes rewritten
  // What prune-rate wrote before Resize sizes were rewritten: 8 channels into weights of 5.
  const std::string why = failure(resize_model(5, 8), original);
  CHECK_THAT(why, Catch::Contains("node 'c2' (Conv) gets 8 input channels ('up')") &&
                      Catch::Contains("its weight 'c2.weight' expects 5"));
}

TEST_CASE("verify_pruned checks that graph outputs keep their inferred shape", "[prune]") {
  const auto original = onnxu::infer_shapes(resize_model(8, 8), /*declared_outputs=*/false);
  // The declared output shape says [1,4,16,16]; inference gives [1,3,16,16].
  CHECK_THAT(failure(resize_model(8, 8, 3), original),
             Catch::Contains("graph output 'y' has shape [1, 4, 16, 16] in the input model and [1, 3, 16, 16]"));
}

TEST_CASE("verify_pruned checks BatchNormalization, Gemm and MatMul input counts", "[prune]") {
  const auto original = onnxu::infer_shapes(chain_model(6, 6, 96, 10), /*declared_outputs=*/false);
  CHECK(failure(chain_model(6, 6, 96, 10), original).empty());
  CHECK(failure(chain_model(4, 4, 64, 10), original).empty());  // 2 channels x 16 positions removed
  CHECK_THAT(failure(chain_model(6, 5, 96, 10), original),
             Catch::Contains("node 'bn' (BatchNormalization) gets 6 channels ('c'), its parameter 'bn.scale' expects 5"));
  CHECK_THAT(failure(chain_model(6, 6, 80, 10), original),
             Catch::Contains("node 'fc' (Gemm) gets 96 input features ('flat'), its B 'fc.weight' expects 80"));
  CHECK_THAT(failure(chain_model(6, 6, 96, 9), original),
             Catch::Contains("node 'mm' (MatMul) gets 10 input features ('fc'), its B 'mm.weight' expects 9"));
}

TEST_CASE("verify_pruned checks the nodes inside subgraphs", "[prune]") {
  const auto original = onnxu::infer_shapes(if_model(6), /*declared_outputs=*/false);
  CHECK(failure(if_model(6), original).empty());
  CHECK_THAT(failure(if_model(5), original),
             Catch::Contains("node 't' (Conv) in subgraph 'then' of node 'if' (If) gets 6 input channels ('c')") &&
                 Catch::Contains("expects 5"));
}
