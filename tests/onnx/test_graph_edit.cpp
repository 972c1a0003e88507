// The editable graph (onnxu::Graph): after every edit its indexes equal those of a GraphView
// built afresh over the edited proto (producers, consumers, subgraph reads, names, order);
// edits that would break the graph are refused and change nothing; a replaced node computes
// the same as the original (checked with the training engine); a model with no-op edits, saved
// and read back, is equal to the original as a protobuf message.
#include <google/protobuf/util/message_differencer.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "error_check.h"
#include "nn/model.h"
#include "onnx/graph.h"
#include "onnx/model.h"
#include "onnx/shapes.h"

using namespace hpcnn;
using namespace hpcnn::onnxu;
using google::protobuf::util::MessageDifferencer;

namespace {

onnx::NodeProto make_node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
                          const std::string& name = "") {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  for (auto& i : ins) n.add_input(i);
  for (auto& o : outs) n.add_output(o);
  return n;
}

onnx::TensorProto float_tensor(const std::string& name, const Dims& dims, float first = 0.5f) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  for (int64_t i = 0; i < numel(dims); ++i) t.add_float_data(first + 0.25f * static_cast<float>(i));
  return t;
}

void add_value(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name, const Dims& dims) {
  auto* v = list->Add();
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

std::vector<std::pair<int, int>> uses(const std::vector<Use>& u) {
  std::vector<std::pair<int, int>> out;
  for (const Use& x : u) out.emplace_back(x.node, x.input);
  return out;
}

// Every name the graph mentions, subgraphs included.
void names_in(const onnx::GraphProto& g, std::set<std::string>& out) {
  for (const auto& v : g.input()) out.insert(v.name());
  for (const auto& v : g.output()) out.insert(v.name());
  for (const auto& t : g.initializer()) out.insert(t.name());
  for (const auto& n : g.node()) {
    out.insert(n.input().begin(), n.input().end());
    out.insert(n.output().begin(), n.output().end());
    for (const auto* sg : subgraphs(n)) names_in(*sg, out);
  }
}

// The edited graph's indexes equal a fresh view's.
void check_index(const Graph& g) {
  const GraphView fresh(g.graph());
  REQUIRE(g.node_count() == fresh.node_count());
  std::set<std::string> names;
  names_in(g.graph(), names);
  for (const auto& v : names) {
    INFO("value '" << v << "'");
    CHECK(g.producer(v) == fresh.producer(v));
    CHECK(uses(g.consumers(v)) == uses(fresh.consumers(v)));
    CHECK(g.defined(v) == fresh.defined(v));
    CHECK(g.initializer(v) == fresh.initializer(v));
    CHECK(g.is_graph_input(v) == fresh.is_graph_input(v));
    CHECK(g.is_graph_output(v) == fresh.is_graph_output(v));
  }
  for (int i = 0; i < g.node_count(); ++i) {
    INFO(g.describe(i));
    CHECK(g.subgraph_reads(i) == fresh.subgraph_reads(i));
    if (!g.node(i).name().empty()) CHECK(g.find_node(g.node(i).name()) == fresh.find_node(g.node(i).name()));
  }
  CHECK(g.topo_order() == fresh.topo_order());
}

// x -> Conv(w) -> c -> Relu -> r; If(cond) whose branches read r (then) and c (else) -> z;
// Add(r, z) -> y.
onnx::ModelProto branchy_model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto& g = *m.mutable_graph();
  g.set_name("branchy");
  add_value(g.mutable_input(), "x", {1, 2, 4, 4});
  auto* cond = g.add_input();
  cond->set_name("cond");
  cond->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::BOOL);
  add_value(g.mutable_output(), "y", {1, 3, 4, 4});
  add_value(g.mutable_value_info(), "r", {1, 3, 4, 4});
  *g.add_initializer() = float_tensor("w", {3, 2, 1, 1});
  *g.add_node() = make_node("Conv", {"x", "w"}, {"c"}, "conv");
  *g.add_node() = make_node("Relu", {"c"}, {"r"}, "relu");
  onnx::NodeProto ifn = make_node("If", {"cond"}, {"z"}, "if");
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = ifn.add_attribute();
    a->set_name(branch);
    a->set_type(onnx::AttributeProto::GRAPH);
    const std::string b = branch;
    a->mutable_g()->set_name(b);
    add_value(a->mutable_g()->mutable_output(), b + ".out", {1, 3, 4, 4});
    *a->mutable_g()->add_node() = make_node("Identity", {b == "then_branch" ? "r" : "c"}, {b + ".out"});
  }
  *g.add_node() = ifn;
  *g.add_node() = make_node("Add", {"r", "z"}, {"y"}, "add");
  return m;
}

}  // namespace

TEST_CASE("Graph keeps producers, consumers and subgraph reads right across edits", "[onnx][graph_edit]") {
  onnx::ModelProto m = branchy_model();
  Graph g(m);
  check_index(g);

  // Insert before a node: later indices shift.
  const std::string cid = g.unique_value_name("c");
  CHECK(cid == "c_1");
  const int id = g.insert_before(1, make_node("Identity", {"c"}, {cid}, g.unique_node_name("relu")));
  CHECK(id == 1);
  CHECK(g.node(id).name() == "relu_1");
  CHECK(g.find_node("relu") == 2);
  check_index(g);

  // Rewire the Relu to read the new value.
  g.set_input(2, 0, cid);
  CHECK(uses(g.consumers(cid)) == std::vector<std::pair<int, int>>{{2, 0}});
  CHECK(uses(g.consumers("c")) == std::vector<std::pair<int, int>>{{1, 0}, {3, Use::subgraph}});
  check_index(g);

  // Insert after a node, reading a value inside a subgraph (If's subgraph reads).
  onnx::NodeProto sub_if = make_node("If", {"cond"}, {"z2"}, "if2");
  auto* a = sub_if.add_attribute();
  a->set_name("then_branch");
  a->set_type(onnx::AttributeProto::GRAPH);
  add_value(a->mutable_g()->mutable_output(), "t2.out", {1, 3, 4, 4});
  *a->mutable_g()->add_node() = make_node("Neg", {cid}, {"t2.out"});
  const int if2 = g.insert_after(2, sub_if);
  CHECK(if2 == 3);
  CHECK(g.subgraph_reads(if2) == std::vector<std::string>{cid});
  check_index(g);

  // Rename a value read inside a subgraph: the branch's node input follows, as does value_info.
  g.rename_value("r", "relu.out");
  CHECK(g.subgraph_reads(g.find_node("if")) == std::vector<std::string>{"relu.out", "c"});
  CHECK(m.graph().value_info(0).name() == "relu.out");
  CHECK(g.producer("r") == -1);
  check_index(g);

  // Redirect the reads of the first If's output, including the graph output, then remove it.
  g.replace_uses("z", "z2");
  CHECK(g.consumers("z").empty());
  g.remove_node(g.find_node("if"));
  CHECK(g.find_node("if") == -1);
  CHECK(g.consumers("c").size() == 1);  // the If's subgraph read is gone
  check_index(g);

  // An attribute holding a graph: subgraph reads follow.
  onnx::AttributeProto then;
  then.set_name("then_branch");
  then.set_type(onnx::AttributeProto::GRAPH);
  add_value(then.mutable_g()->mutable_output(), "t3.out", {1, 2, 4, 4});
  *then.mutable_g()->add_node() = make_node("Neg", {"x"}, {"t3.out"});
  g.set_attribute(g.find_node("if2"), then);
  CHECK(g.subgraph_reads(g.find_node("if2")) == std::vector<std::string>{"x"});
  check_index(g);

  // Initializers: add, replace, remove.
  g.put_initializer(float_tensor("w2", {3}));
  CHECK(g.initializer("w2"));
  g.put_initializer(float_tensor("w2", {4}));
  CHECK(g.initializer("w2")->dims(0) == 4);
  check_index(g);
  g.remove_initializer("w2");
  CHECK_FALSE(g.initializer("w2"));
  check_index(g);
  const auto ref = find_constant(g, "w");
  REQUIRE(ref);
  g.edit_constant(*ref, [](onnx::TensorProto& t) { slice_axis(t, 0, {0, 2}); });
  CHECK(g.initializer("w")->dims(0) == 2);
  check_index(g);
  // Names freed by edits can be taken again; reserved ones cannot.
  CHECK(g.unique_value_name("r") == "r");
  CHECK(g.unique_value_name("r") == "r_1");
  CHECK(g.unique_value_name("t3.out") == "t3.out_1");  // defined inside a subgraph
}

TEST_CASE("Graph refuses edits that would break the graph and leaves it unchanged", "[onnx][graph_edit]") {
  onnx::ModelProto m = branchy_model();
  const onnx::ModelProto before = m;
  Graph g(m);
  auto refused = [&](auto&& edit, const std::string& text) {
    testing::check_error(edit, ErrorKind::bad_input, text);
    CHECK(MessageDifferencer::Equals(before, m));
    check_index(g);
  };
  refused([&] { g.remove_node(g.find_node("relu")); }, "node 'if' (If) reads its output 'r'");  // in a branch
  refused([&] { g.remove_node(g.find_node("conv")); }, "node 'relu' (Relu) reads its output 'c'");
  refused([&] { g.remove_node(g.find_node("add")); }, "its output 'y' is a graph output");
  refused([&] { g.set_input(g.find_node("conv"), 0, "r"); }, "that would make a cycle");
  refused([&] { g.set_input(g.find_node("conv"), 0, "nothing"); }, "'nothing': it is not defined");
  refused([&] { g.set_input(g.find_node("conv"), 5, "x"); }, "no such input");
  refused([&] { g.replace_uses("x", "y"); }, "that would make a cycle");
  refused([&] { g.replace_uses("x", "nothing"); }, "it is not defined");
  refused([&] { g.insert_node(0, make_node("Relu", {"x"}, {"c"})); }, "defines 'c', which is already defined");
  refused([&] { g.insert_node(0, make_node("Relu", {"x"}, {"then_branch.out"})); }, "already defined");
  refused([&] { g.insert_node(0, make_node("Relu", {"gone"}, {"new"})); }, "reads 'gone'");
  refused([&] { g.insert_node(9, make_node("Relu", {"x"}, {"new"})); }, "at index 9");
  refused([&] { g.rename_value("r", "c"); }, "the name is taken");
  refused([&] { g.rename_value("r", "else_branch.out"); }, "the name is taken");
  refused([&] { g.remove_initializer("w"); }, "node 'conv' (Conv) reads it");
  refused([&] { g.put_initializer(float_tensor("c", {1})); }, "the name is already defined");
  onnx::AttributeProto bad;
  bad.set_name("then_branch");
  bad.set_type(onnx::AttributeProto::GRAPH);
  *bad.mutable_g()->add_node() = make_node("Neg", {"y"}, {"q"});
  refused([&] { g.set_attribute(g.find_node("if"), bad); }, "that would make a cycle");
  *bad.mutable_g()->mutable_node(0) = make_node("Neg", {"x"}, {"c"});
  refused([&] { g.set_attribute(g.find_node("if"), bad); }, "would define 'c' inside a subgraph");
}

TEST_CASE("Graph lists new initializers as graph inputs for IR version 3 and keeps their dims", "[onnx][graph_edit]") {
  onnx::ModelProto m = branchy_model();
  m.set_ir_version(3);
  add_value(m.mutable_graph()->mutable_input(), "w", {3, 2, 1, 1});
  Graph g(m);
  g.put_initializer(make_int64_tensor("shape", {1, 48}));
  REQUIRE(g.is_graph_input("shape"));
  const auto& in = m.graph().input(m.graph().input_size() - 1);
  CHECK(in.type().tensor_type().elem_type() == onnx::TensorProto::INT64);
  CHECK(in.type().tensor_type().shape().dim(0).dim_value() == 2);
  g.edit_constant(*find_constant(g, "w"), [](onnx::TensorProto& t) { slice_axis(t, 0, {1}); });
  CHECK(m.graph().input(2).type().tensor_type().shape().dim(0).dim_value() == 1);
  check_index(g);
  g.set_input(g.find_node("conv"), 1, "shape");  // (not a meaningful Conv: the index only)
  g.remove_initializer("w");
  CHECK_FALSE(g.is_graph_input("w"));
  CHECK(m.graph().input_size() == 3);
  check_index(g);
}

TEST_CASE("replacing a node by a small subgraph gives a valid graph that computes the same", "[onnx][graph_edit]") {
  // x [2,4] -> Gemm(B [4,3], C [3]) -> g -> Relu -> y. Replaced by MatMul(x, B) + Add(C'),
  // C' a new initializer, the Gemm and the old C removed (as sparsify-fcl replaces its FC layer).
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto& gp = *m.mutable_graph();
  gp.set_name("fc");
  add_value(gp.mutable_input(), "x", {2, 4});
  add_value(gp.mutable_output(), "y", {2, 3});
  *gp.add_initializer() = float_tensor("B", {4, 3}, -1.0f);
  *gp.add_initializer() = float_tensor("C", {3}, 0.125f);
  *gp.add_node() = make_node("Gemm", {"x", "B", "C"}, {"g"}, "fc");
  *gp.add_node() = make_node("Relu", {"g"}, {"y"}, "relu");
  const onnx::ModelProto original = m;

  Graph g(m);
  const int fc = g.find_node("fc");
  onnx::TensorProto c2 = *g.initializer("C");
  c2.set_name(g.unique_value_name("fc.bias"));
  g.put_initializer(c2);
  const std::string mm = g.unique_value_name("fc.matmul"), sum = g.unique_value_name("fc.out");
  const int at = g.insert_before(fc, make_node("MatMul", {"x", "B"}, {mm}, g.unique_node_name("fc.matmul")));
  g.insert_after(at, make_node("Add", {mm, c2.name()}, {sum}, g.unique_node_name("fc.add")));
  g.replace_uses("g", sum);
  g.remove_node(g.find_node("fc"));
  g.rename_value(sum, "g");  // the old name again, for readers outside
  g.remove_initializer("C");
  check_index(g);

  // Valid, in topological file order, shapes inferred by ONNX, and the same numbers.
  const GraphView v(m.graph());
  CHECK(v.topo_order() == std::vector<int>{0, 1, 2});
  std::vector<std::string> ops;
  for (const auto& n : m.graph().node()) ops.push_back(n.op_type());
  CHECK(ops == std::vector<std::string>{"MatMul", "Add", "Relu"});
  const ShapeMap shapes = infer_shapes(m, /*declared_outputs=*/false);
  REQUIRE(shapes.count("y"));
  CHECK(shapes.at("y") == Dims{2, 3});
  CHECK(shapes.at("g") == Dims{2, 3});
  nn::Model before(original, "original"), after(m, "edited");
  const Tensor x = Tensor::from_values({2, 4}, {0.5f, -1, 2, 0.25f, 1, 1, -0.5f, 3});
  const Tensor a = before.forward({x}, nn::Mode::inference)[0], b = after.forward({x}, nn::Mode::inference)[0];
  REQUIRE(a.numel() == b.numel());
  for (int64_t i = 0; i < a.numel(); ++i) CHECK(b.data()[i] == Approx(a.data()[i]));
  CHECK(a.data()[0] != 0.0f);
}

TEST_CASE("a model with no-op edits, saved and read back, equals the original as a protobuf message", "[onnx][graph_edit]") {
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() / "hpcnn_graph_edit_test";
  std::filesystem::create_directories(tmp);
  for (const char* name : {"fmnist_cnn", "resnet_tiny", "misc_ops"}) {
    INFO(name);
    const Model original = load_model(std::filesystem::path(HPCNN_TEST_DATA_DIR) / "nn" / name / "model.onnx");
    Model model = original;
    {
      Graph g(model.proto);
      const std::string x = model.proto.graph().input(0).name();
      g.rename_value(x, g.unique_value_name("renamed"));
      g.rename_value("renamed", x);
      int n = g.node_count() - 1;
      while (g.node(n).input_size() == 0) --n;
      g.set_input(n, 0, g.node(n).input(0));
      const std::string tmp_out = g.unique_value_name("tmp");
      g.remove_node(g.insert_before(0, make_node("Identity", {x}, {tmp_out})));
      onnx::TensorProto t = model.proto.graph().initializer(0);
      g.put_initializer(t);
      check_index(g);
    }
    CHECK(MessageDifferencer::Equals(original.proto, model.proto));
    const auto path = tmp / (std::string(name) + ".onnx");
    save_model(model.proto, path);
    CHECK(MessageDifferencer::Equals(original.proto, load_model(path).proto));
  }
  std::filesystem::remove_all(tmp);
}
