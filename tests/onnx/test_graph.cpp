#include <catch2/catch.hpp>

#include "core/error.h"
#include "onnx/graph.h"

using namespace hpcnn::onnxu;

namespace {
onnx::NodeProto* add_node(onnx::GraphProto& g, const std::string& op, std::vector<std::string> ins,
                          std::vector<std::string> outs, const std::string& name = "") {
  auto* n = g.add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (auto& i : ins) n->add_input(i);
  for (auto& o : outs) n->add_output(o);
  return n;
}
}  // namespace

TEST_CASE("GraphView orders nodes topologically and finds producers and consumers", "[onnx]") {
  onnx::GraphProto g;
  g.add_input()->set_name("x");
  g.add_output()->set_name("z");
  add_node(g, "Relu", {"y"}, {"z"}, "second");  // listed before its producer
  add_node(g, "Relu", {"x"}, {"y"}, "first");
  GraphView v(g);
  CHECK(v.topo_order() == std::vector<int>{1, 0});
  CHECK(v.producer("y") == 1);
  CHECK(v.producer("x") == -1);
  REQUIRE(v.consumers("y").size() == 1);
  CHECK(v.consumers("y")[0].node == 0);
  CHECK(v.find_node("first") == 1);
  CHECK(v.describe(0) == "node 'second' (Relu)");
}

TEST_CASE("GraphView rejects undefined inputs, duplicates and cycles, naming the node", "[onnx]") {
  onnx::GraphProto g;
  g.add_input()->set_name("x");
  add_node(g, "Relu", {"missing"}, {"y"}, "r");
  CHECK_THROWS_WITH(GraphView(g), Catch::Contains("node 'r' (Relu) reads 'missing'"));

  onnx::GraphProto d;
  d.add_input()->set_name("x");
  add_node(d, "Relu", {"x"}, {"y"}, "a");
  add_node(d, "Relu", {"x"}, {"y"}, "b");
  CHECK_THROWS_WITH(GraphView(d), Catch::Contains("already defined"));

  onnx::GraphProto c;
  add_node(c, "Relu", {"b"}, {"a"}, "p");
  add_node(c, "Relu", {"a"}, {"b"}, "q");
  CHECK_THROWS_WITH(GraphView(c), Catch::Contains("cycle"));
}

TEST_CASE("find_constant resolves initializers, Constant and ConstantOfShape", "[onnx]") {
  onnx::GraphProto g;
  *g.add_initializer() = make_int64_tensor("shape", {2, 3});
  auto* cos = add_node(g, "ConstantOfShape", {"shape"}, {"w"});
  auto* a = cos->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  a->mutable_t()->add_dims(1);
  a->mutable_t()->add_float_data(-0.25f);
  auto* k = add_node(g, "Constant", {}, {"c"});
  auto* ka = k->add_attribute();
  ka->set_name("value");
  ka->set_type(onnx::AttributeProto::TENSOR);
  *ka->mutable_t() = make_int64_tensor("", {4});
  GraphView v(g);
  auto w = find_constant(v, "w");
  REQUIRE(w);
  CHECK(w->kind == ConstantRef::Kind::constant_of_shape);
  CHECK(w->dims == Dims{2, 3});
  CHECK(w->fill == -0.25);
  auto c = find_constant(v, "c");
  REQUIRE(c);
  CHECK(c->kind == ConstantRef::Kind::constant_node);
  CHECK(*constant_int64s(v, "c") == std::vector<int64_t>{4});
  CHECK(find_constant(v, "shape")->kind == ConstantRef::Kind::initializer);
  CHECK_FALSE(find_constant(v, "nothing"));
}
