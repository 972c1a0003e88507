// Structurally zero channels (nn/zero_channels.h): each rule on a small hand-built graph whose
// zero channels are known by construction, and the parameter entries that hold them at zero.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/zero_channels.h"

namespace {

using hpcnn::nn::analyze_zero_channels;
using hpcnn::nn::ZeroHolder;

onnx::TensorProto floats(const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  for (float x : v) t.add_float_data(x);
  return t;
}

onnx::NodeProto& node(onnx::GraphProto& g, const std::string& op, std::vector<std::string> in, const std::string& out) {
  onnx::NodeProto& n = *g.add_node();
  n.set_op_type(op);
  n.set_name(out);
  for (const auto& i : in) n.add_input(i);
  n.add_output(out);
  return n;
}

// A 1x1 Conv from 2 input channels to 3 filters; filter c's weights are w[c] (both inputs).
void conv(onnx::GraphProto& g, const std::string& in, const std::string& out, std::vector<float> w, std::vector<float> b) {
  std::vector<float> all;
  for (float x : w) all.insert(all.end(), {x, x});
  *g.add_initializer() = floats(out + ".w", {3, 2, 1, 1}, all);
  std::vector<std::string> ins = {in, out + ".w"};
  if (!b.empty()) {
    *g.add_initializer() = floats(out + ".b", {3}, b);
    ins.push_back(out + ".b");
  }
  node(g, "Conv", ins, out);
}

void bn(onnx::GraphProto& g, const std::string& in, const std::string& out, std::vector<float> scale, std::vector<float> bias) {
  *g.add_initializer() = floats(out + ".s", {3}, scale);
  *g.add_initializer() = floats(out + ".b", {3}, bias);
  *g.add_initializer() = floats(out + ".m", {3}, {0.5f, 0.5f, 0.5f});
  *g.add_initializer() = floats(out + ".v", {3}, {1, 1, 1});
  node(g, "BatchNormalization", {in, out + ".s", out + ".b", out + ".m", out + ".v"}, out);
}

std::vector<char> z(std::initializer_list<int> v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("zero channels: Conv, BatchNormalization and channel-wise ops", "[zero_channels]") {
  onnx::ModelProto m;
  onnx::GraphProto& g = *m.mutable_graph();
  g.add_input()->set_name("x");
  conv(g, "x", "c1", {0, 1, 0}, {0, 0, 2});  // filter 1 non-zero; filter 2 zero but bias 2
  bn(g, "c1", "b1", {1, 1, 1}, {0, 0, 0});   // keeps channel 0 zero (input zero, bias 0)
  node(g, "Relu", {"b1"}, "r1");
  node(g, "MaxPool", {"r1"}, "p1");
  bn(g, "p1", "b2", {0, 1, 0}, {0, 0, 3});  // channel 0: scale 0, bias 0 -> zero; channel 2: bias 3
  node(g, "Sigmoid", {"b2"}, "s");          // not followed
  conv(g, "x", "c2", {0, 0, 1}, {});        // no bias
  const auto zc = analyze_zero_channels(m, "test.onnx");
  CHECK(zc.zero("c1") == z({1, 0, 0}));
  CHECK(zc.zero("b1") == z({1, 0, 0}));
  CHECK(zc.zero("r1") == z({1, 0, 0}));
  CHECK(zc.zero("p1") == z({1, 0, 0}));
  CHECK(zc.zero("b2") == z({1, 0, 0}));
  CHECK(zc.zero("s").empty());
  CHECK(zc.zero("x").empty());
  CHECK(zc.zero("c2") == z({1, 1, 0}));
  // p1's channel 0: BN b1's bias, then the conv's filter and bias (b1's scale is not 0, so the
  // chain goes on to c1).
  const std::vector<ZeroHolder> h = zc.holders("p1");
  REQUIRE(h.size() == 3);
  CHECK((h[0].tensor == "b1.b" && h[0].channel == 0));
  CHECK((h[1].tensor == "c1.b" && h[1].channel == 0));
  CHECK((h[2].tensor == "c1.w" && h[2].channel == 0));
  // b2's channel 0: scale and bias 0 stop the chain there.
  const auto h2 = zc.holders("b2");
  REQUIRE(h2.size() == 2);
  CHECK((h2[0].tensor == "b2.b" && h2[1].tensor == "b2.s" && h2[0].channel == 0 && h2[1].channel == 0));
}

TEST_CASE("zero channels: Add, Concat, inference-mode BatchNormalization input", "[zero_channels]") {
  onnx::ModelProto m;
  onnx::GraphProto& g = *m.mutable_graph();
  g.add_input()->set_name("x");
  conv(g, "x", "a", {0, 0, 1}, {0, 0, 0});
  conv(g, "x", "b", {0, 1, 0}, {0, 0, 0});
  node(g, "Add", {"a", "b"}, "sum");  // zero only where both are: channel 0
  onnx::AttributeProto* ax = node(g, "Concat", {"a", "b"}, "cat").add_attribute();
  ax->set_name("axis");
  ax->set_type(onnx::AttributeProto::INT);
  ax->set_i(1);
  node(g, "Add", {"a", "x"}, "unknown");  // the graph input's channels are not known
  bn(g, "a", "n", {1, 1, 1}, {0, 0.5f, 0});
  const auto zc = analyze_zero_channels(m, "test.onnx");
  CHECK(zc.zero("sum") == z({1, 0, 0}));
  CHECK(zc.zero("cat") == z({1, 1, 0, 1, 0, 1}));
  CHECK(zc.zero("unknown").empty());
  CHECK(zc.zero("n") == z({1, 0, 0}));  // channel 1 of a is zero, but its bias is 0.5
  const auto h = zc.holders("cat");     // channels 0, 1 of a and 0, 2 of b
  std::vector<std::string> names;
  for (const auto& e : h) names.push_back(e.tensor + ":" + std::to_string(e.channel));
  CHECK(names == std::vector<std::string>{"a.b:0", "a.b:1", "a.w:0", "a.w:1", "b.b:0", "b.b:2", "b.w:0", "b.w:2"});
  const auto hs = zc.holders("sum");
  CHECK(hs.size() == 4);  // a's and b's filter and bias of channel 0
}

TEST_CASE("zero channels: a BatchNormalization whose size disagrees is named", "[zero_channels]") {
  onnx::ModelProto m;
  onnx::GraphProto& g = *m.mutable_graph();
  g.add_input()->set_name("x");
  conv(g, "x", "c", {0, 1, 1}, {});
  *g.add_initializer() = floats("bn.s", {2}, {1, 1});
  *g.add_initializer() = floats("bn.b", {2}, {0, 0});
  node(g, "BatchNormalization", {"c", "bn.s", "bn.b", "bn.s", "bn.s"}, "bn");
  CHECK_THROWS_WITH(analyze_zero_channels(m, "test.onnx"), Catch::Contains("'bn'") && Catch::Contains("bn.s"));
}
