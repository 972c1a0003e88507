#include <catch2/catch.hpp>

#include "core/error.h"
#include "onnx/graph.h"

using namespace hpcnn::onnxu;

namespace {
onnx::NodeProto* add_node(onnx::GraphProto& g, const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
                          const std::string& name = "") {
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

TEST_CASE("GraphView counts values read inside subgraphs as uses of the node that owns them", "[onnx][graph]") {
  onnx::GraphProto g;
  g.add_input()->set_name("x");
  g.add_input()->set_name("cond");
  g.add_output()->set_name("z");
  *g.add_initializer() = make_int64_tensor("w", {1});
  auto* node = add_node(g, "If", {"cond"}, {"z"}, "if");  // listed before the producer of 'y'
  add_node(g, "Relu", {"x"}, {"y"}, "relu");
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = node->add_attribute();
    a->set_name(branch);
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto& b = *a->mutable_g();
    b.add_output()->set_name(std::string(branch) + ".out");
    add_node(b, "Add", {"y", "w"}, {std::string(branch) + ".sum"});  // reads 'y' and 'w' from outside
    // A nested subgraph reads the branch's own value (not an outer read) and 'x'.
    auto* inner = add_node(b, "If", {"cond"}, {std::string(branch) + ".out"});
    auto* ia = inner->add_attribute();
    ia->set_name("then_branch");
    ia->set_type(onnx::AttributeProto::GRAPH);
    ia->mutable_g()->add_output()->set_name(std::string(branch) + ".in");
    add_node(*ia->mutable_g(), "Sub", {std::string(branch) + ".sum", "x"}, {std::string(branch) + ".in"});
  }
  GraphView v(g);
  CHECK(v.subgraph_reads(0) == std::vector<std::string>{"y", "w", "cond", "x"});
  CHECK(v.subgraph_reads(1).empty());
  CHECK(v.topo_order() == std::vector<int>{1, 0});  // the If waits for 'y'
  REQUIRE(v.consumers("y").size() == 1);
  CHECK(v.consumers("y")[0].node == 0);
  CHECK(v.consumers("y")[0].input == Use::subgraph);
  CHECK(v.consumers("w").size() == 1);
  CHECK(v.consumers("cond").size() == 2);  // the If's input and the nested If's
  CHECK(v.consumers("then_branch.sum").empty());
  CHECK(subgraphs(g.node(0)).size() == 2);

  // An outer read that nothing defines is refused, naming the node.
  add_node(*node->mutable_attribute(0)->mutable_g(), "Relu", {"gone"}, {"r"});
  CHECK_THROWS_WITH(GraphView(g), Catch::Contains("node 'if' (If) reads 'gone' inside a subgraph"));
}

TEST_CASE("constant_doubles reads initializers and Constant values", "[onnx][graph]") {
  onnx::GraphProto g;
  *g.add_initializer() = make_int64_tensor("sizes", {1, 8});
  auto* k = add_node(g, "Constant", {}, {"scales"});
  auto* a = k->add_attribute();
  a->set_name("value_floats");
  a->set_type(onnx::AttributeProto::FLOATS);
  a->add_floats(1.0f);
  a->add_floats(2.5f);
  GraphView v(g);
  CHECK(*constant_doubles(v, "sizes") == std::vector<double>{1, 8});
  CHECK(*constant_doubles(v, "scales") == std::vector<double>{1, 2.5});
  CHECK_FALSE(constant_doubles(v, "nothing"));
}
