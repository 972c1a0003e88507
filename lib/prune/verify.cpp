#include "prune/verify.h"

#include <optional>
#include <string>

#include "core/error.h"
#include "onnx/graph.h"
#include "onnx/model.h"
#include "onnx/op_facts.h"

namespace hpcnn::prune {
namespace {

struct Verifier {
  const onnxu::ShapeMap& now;
  const onnxu::ShapeMap& before;
  int64_t opset;  // of the default domain

  [[noreturn]] static void fail(const std::string& message) {
    throw_error(ErrorKind::unsupported, "internal error: the pruned model is inconsistent: " + message);
  }

  // Dim `axis` of `value` (negative: from the end) in `shapes`; -1 when unknown.
  static int64_t dim_in(const onnxu::ShapeMap& shapes, const std::string& value, int axis) {
    auto it = shapes.find(value);
    if (it == shapes.end()) return -1;
    const int rank = static_cast<int>(it->second.size());
    if (axis < 0) axis += rank;
    return axis >= 0 && axis < rank ? it->second[axis] : -1;
  }

  // Dim of the pruned model; -1 when unknown there and in the input model.
  int64_t dim(const std::string& who, const std::string& value, int axis) const {
    const int64_t d = dim_in(now, value, axis);
    if (d < 0 && dim_in(before, value, axis) >= 0)
      fail(who + ": shape inference no longer determines dim " + std::to_string(axis) + " of '" + value + "'");
    return d;
  }

  static void expect(const std::string& who, const std::string& got_what, int64_t got, const std::string& want_what,
                     int64_t want) {
    if (got >= 0 && want >= 0 && got != want)
      fail(who + " gets " + std::to_string(got) + " " + got_what + ", " + want_what + " expects " + std::to_string(want));
  }

  // The counts that the operator facts (onnx/op_facts.h) tie together: a conv-like operator's
  // input channels (features) and its weight's input axis; a pass-through operator's channels
  // and the length of each per-channel parameter or running statistic.
  void check_node(const onnx::NodeProto& nd, const std::string& who) const {
    const onnxu::OpFacts* facts = onnxu::find_op_facts(nd);
    const onnxu::Signature* sig = facts ? facts->at(opset) : nullptr;
    if (!sig) return;
    auto in = [&](int k) { return k >= 0 && k < nd.input_size() ? nd.input(k) : std::string(); };
    const onnxu::InputFact xf = sig->inputs.empty() ? onnxu::InputFact{} : sig->inputs[0];
    const int wi = sig->find(onnxu::Role::weight);
    if (facts->channels == onnxu::Channels::conv && wi >= 0 && wi < nd.input_size()) {
      const int64_t g = onnxu::attr_int(nd, "group", 1);
      const int64_t cin_g = dim(who, in(wi), sig->inputs[wi].in_axis);
      expect(who, "input channels ('" + in(0) + "')", dim(who, in(0), xf.axis),
             "its weight '" + in(wi) + "'" + (g != 1 ? " with " + std::to_string(g) + " groups" : ""),
             cin_g < 0 ? -1 : cin_g * g);
    } else if (facts->channels == onnxu::Channels::dense && wi >= 0 && wi < nd.input_size()) {
      const onnxu::InputFact& wf = sig->inputs[wi];
      int w_axis = onnxu::node_axis(nd, wf, wf.in_axis);
      auto it = now.find(in(wi));
      if (w_axis == -2 && it != now.end() && it->second.size() == 1) w_axis = 0;  // a 1-D MatMul B is [K]
      expect(who, "input features ('" + in(0) + "')", dim(who, in(0), onnxu::node_axis(nd, xf, xf.axis)),
             "its " + std::string(wf.name) + " '" + in(wi) + "'", dim(who, in(wi), w_axis));
    } else if (facts->channels == onnxu::Channels::pass_through) {
      std::optional<int64_t> c;  // X dim 1, read only for operators with per-channel inputs
      for (int k = 1; k < nd.input_size() && k < static_cast<int>(sig->inputs.size()); ++k) {
        const onnxu::Role r = sig->inputs[k].role;
        if (r != onnxu::Role::per_channel && r != onnxu::Role::running_stat) continue;
        if (!c) c = dim(who, in(0), 1);
        expect(who, "channels ('" + in(0) + "')", *c, "its parameter '" + in(k) + "'", dim(who, in(k), 0));
      }
    }
  }

  void check_graph(const onnx::GraphProto& g, const std::string& scope) const {
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& nd = g.node(i);
      const std::string who =
          "node " + (nd.name().empty() ? "#" + std::to_string(i) : "'" + nd.name() + "'") + " (" + nd.op_type() + ")" + scope;
      check_node(nd, who);
      for (const auto* sg : onnxu::subgraphs(nd)) check_graph(*sg, " in subgraph '" + sg->name() + "' of " + who);
    }
  }
};

}  // namespace

void verify_pruned(const onnx::ModelProto& pruned, const onnxu::ShapeMap& original) {
  const onnxu::ShapeMap now = onnxu::infer_shapes(pruned, /*declared_outputs=*/false);
  const Verifier v{now, original, onnxu::default_opset(pruned)};
  v.check_graph(pruned.graph(), "");
  for (const auto& o : pruned.graph().output()) {
    auto b = original.find(o.name());
    if (b == original.end()) continue;
    auto a = now.find(o.name());
    if (a == now.end()) Verifier::fail("shape inference no longer determines the shape of graph output '" + o.name() + "'");
    if (a->second != b->second)
      Verifier::fail("graph output '" + o.name() + "' has shape " + onnxu::dims_to_string(b->second) +
                     " in the input model and " + onnxu::dims_to_string(a->second) + " after pruning");
  }
}

}  // namespace hpcnn::prune
