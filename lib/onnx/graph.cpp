#include "onnx/graph.h"

#include <queue>

#include "core/error.h"

namespace hpcnn::onnxu {
namespace {

// Appends to `out` (once each, via `seen`) the names `g` reads but does not define itself (its
// inputs, initializers and node outputs), including those its nested subgraphs read from it
// or from further out.
void outer_reads(const onnx::GraphProto& g, std::vector<std::string>& out, std::unordered_set<std::string>& seen) {
  std::unordered_set<std::string> defined;
  for (const auto& v : g.input()) defined.insert(v.name());
  for (const auto& t : g.initializer()) defined.insert(t.name());
  for (const auto& nd : g.node())
    for (const auto& o : nd.output()) defined.insert(o);
  auto read = [&](const std::string& v) {
    if (!v.empty() && !defined.count(v) && seen.insert(v).second) out.push_back(v);
  };
  for (const auto& nd : g.node()) {
    for (const auto& in : nd.input()) read(in);
    std::vector<std::string> inner;
    std::unordered_set<std::string> inner_seen;
    for (const auto* sg : subgraphs(nd)) outer_reads(*sg, inner, inner_seen);
    for (const auto& v : inner) read(v);
  }
  for (const auto& o : g.output()) read(o.name());  // an output may name an outer value directly
}

}  // namespace

std::vector<const onnx::GraphProto*> subgraphs(const onnx::NodeProto& node) {
  std::vector<const onnx::GraphProto*> out;
  for (const auto& a : node.attribute()) {
    if (a.has_g()) out.push_back(&a.g());
    for (const auto& sg : a.graphs()) out.push_back(&sg);
  }
  return out;
}

GraphView::GraphView(const onnx::GraphProto& graph) : graph_(&graph) {
  for (const auto& t : graph.initializer()) initializers_[t.name()] = &t;
  for (const auto& v : graph.input()) inputs_.insert(v.name());
  for (const auto& v : graph.output()) outputs_.insert(v.name());
  const int n = graph.node_size();
  for (int i = 0; i < n; ++i) {
    const auto& nd = graph.node(i);
    if (!nd.name().empty()) by_name_.emplace(nd.name(), i);
    for (const auto& out : nd.output()) {
      if (out.empty()) continue;
      auto [it, inserted] = producer_.emplace(out, i);
      if (!inserted || initializers_.count(out))
        throw_error(ErrorKind::bad_input, describe(i) + " produces '" + out + "', which is already defined" +
                                              (inserted ? " as an initializer" : " by " + describe(it->second)));
    }
  }
  auto defined = [&](const std::string& v) { return producer_.count(v) || initializers_.count(v) || inputs_.count(v); };
  subgraph_reads_.resize(n);
  for (int i = 0; i < n; ++i) {
    const auto& nd = graph.node(i);
    for (int k = 0; k < nd.input_size(); ++k) {
      const std::string& in = nd.input(k);
      if (in.empty()) continue;  // omitted optional input
      if (!defined(in))
        throw_error(ErrorKind::bad_input, describe(i) + " reads '" + in +
                                              "', which no node, initializer or graph input defines (truncated model?)");
      consumers_[in].push_back({i, k});
    }
    std::unordered_set<std::string> seen;
    for (const auto* sg : subgraphs(nd)) outer_reads(*sg, subgraph_reads_[i], seen);
    for (const auto& v : subgraph_reads_[i]) {
      if (!defined(v))
        throw_error(ErrorKind::bad_input, describe(i) + " reads '" + v +
                                              "' inside a subgraph, which no node, initializer or graph input defines");
      consumers_[v].push_back({i, Use::subgraph});
    }
  }
  for (const auto& out : graph.output())
    if (!producer_.count(out.name()) && !initializers_.count(out.name()) && !inputs_.count(out.name()))
      throw_error(ErrorKind::bad_input, "graph output '" + out.name() + "' is not produced by any node");
  // Kahn's algorithm, stable in file order.
  std::vector<int> indeg(n, 0);
  for (int i = 0; i < n; ++i) {
    for (const auto& in : graph.node(i).input())
      if (!in.empty() && producer_.count(in)) ++indeg[i];
    for (const auto& v : subgraph_reads_[i])
      if (producer_.count(v)) ++indeg[i];
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i)
    if (indeg[i] == 0) ready.push(i);
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    order_.push_back(i);
    for (const auto& out : graph.node(i).output()) {
      auto it = consumers_.find(out);
      if (out.empty() || it == consumers_.end()) continue;
      for (const Use& u : it->second)
        if (--indeg[u.node] == 0) ready.push(u.node);
    }
  }
  if (static_cast<int>(order_.size()) != n) {
    for (int i = 0; i < n; ++i)
      if (indeg[i] > 0) throw_error(ErrorKind::bad_input, "the graph has a cycle through " + describe(i));
  }
}

int GraphView::producer(const std::string& value) const {
  auto it = producer_.find(value);
  return it == producer_.end() ? -1 : it->second;
}

const std::vector<Use>& GraphView::consumers(const std::string& value) const {
  static const std::vector<Use> none;
  auto it = consumers_.find(value);
  return it == consumers_.end() ? none : it->second;
}

int GraphView::find_node(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

const onnx::TensorProto* GraphView::initializer(const std::string& name) const {
  auto it = initializers_.find(name);
  return it == initializers_.end() ? nullptr : it->second;
}

std::string GraphView::describe(int i) const {
  const auto& nd = graph_->node(i);
  if (!nd.name().empty()) return "node '" + nd.name() + "' (" + nd.op_type() + ")";
  return "node #" + std::to_string(i) + " (" + nd.op_type() + ")";
}

const onnx::AttributeProto* find_attribute(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t attr_int(const onnx::NodeProto& node, const std::string& name, int64_t fallback) {
  const auto* a = find_attribute(node, name);
  return a ? a->i() : fallback;
}

float attr_float(const onnx::NodeProto& node, const std::string& name, float fallback) {
  const auto* a = find_attribute(node, name);
  return a ? a->f() : fallback;
}

std::vector<int64_t> attr_ints(const onnx::NodeProto& node, const std::string& name) {
  const auto* a = find_attribute(node, name);
  if (!a) return {};
  return {a->ints().begin(), a->ints().end()};
}

std::string attr_string(const onnx::NodeProto& node, const std::string& name, const std::string& fallback) {
  const auto* a = find_attribute(node, name);
  return a ? a->s() : fallback;
}

std::optional<ConstantRef> find_constant(const GraphView& view, const std::string& value) {
  if (const auto* t = view.initializer(value)) {
    ConstantRef r{ConstantRef::Kind::initializer, value, -1, {}, onnx::TensorProto::FLOAT, 0, {}};
    r.dims = dims_of(*t);
    r.dtype = t->data_type();
    return r;
  }
  const int p = view.producer(value);
  if (p < 0) return std::nullopt;
  const auto& nd = view.node(p);
  if (nd.op_type() == "Constant" && nd.domain().empty()) {
    const auto* a = find_attribute(nd, "value");
    if (!a || !a->has_t()) return std::nullopt;
    ConstantRef r{ConstantRef::Kind::constant_node, value, p, {}, onnx::TensorProto::FLOAT, 0, {}};
    r.dims = dims_of(a->t());
    r.dtype = a->t().data_type();
    return r;
  }
  if (nd.op_type() == "ConstantOfShape" && nd.domain().empty() && nd.input_size() == 1) {
    auto shape = constant_int64s(view, nd.input(0));
    if (!shape) return std::nullopt;
    ConstantRef r{ConstantRef::Kind::constant_of_shape, value, p, {}, onnx::TensorProto::FLOAT, 0, {}};
    r.dims = *shape;
    r.shape_name = nd.input(0);
    r.dtype = onnx::TensorProto::FLOAT;
    r.fill = 0;
    if (const auto* a = find_attribute(nd, "value"); a && a->has_t()) {
      r.dtype = a->t().data_type();
      auto v = to_doubles(a->t());
      if (v.size() != 1) throw_error(ErrorKind::bad_input, view.describe(p) + ": 'value' must hold one element");
      r.fill = v[0];
    }
    numel(r.dims);  // validates
    return r;
  }
  return std::nullopt;
}

onnx::TensorProto* constant_tensor(onnx::GraphProto& graph, const ConstantRef& ref) {
  switch (ref.kind) {
    case ConstantRef::Kind::initializer:
      for (auto& t : *graph.mutable_initializer())
        if (t.name() == ref.name) return &t;
      return nullptr;
    case ConstantRef::Kind::constant_node:
      for (auto& a : *graph.mutable_node(ref.node)->mutable_attribute())
        if (a.name() == "value") return a.mutable_t();
      return nullptr;
    case ConstantRef::Kind::constant_of_shape: return nullptr;
  }
  return nullptr;
}

std::optional<std::vector<int64_t>> constant_int64s(const GraphView& view, const std::string& value) {
  if (const auto* t = view.initializer(value)) return to_int64s(*t);
  const int p = view.producer(value);
  if (p < 0) return std::nullopt;
  const auto& nd = view.node(p);
  if (nd.op_type() != "Constant") return std::nullopt;
  if (const auto* a = find_attribute(nd, "value"); a && a->has_t()) return to_int64s(a->t());
  if (const auto* a = find_attribute(nd, "value_ints")) return std::vector<int64_t>(a->ints().begin(), a->ints().end());
  if (const auto* a = find_attribute(nd, "value_int")) return std::vector<int64_t>{a->i()};
  return std::nullopt;
}

std::optional<std::vector<double>> constant_doubles(const GraphView& view, const std::string& value) {
  if (const auto* t = view.initializer(value)) return to_doubles(*t);
  const int p = view.producer(value);
  if (p < 0) return std::nullopt;
  const auto& nd = view.node(p);
  if (nd.op_type() != "Constant") return std::nullopt;
  if (const auto* a = find_attribute(nd, "value"); a && a->has_t()) return to_doubles(a->t());
  if (const auto* a = find_attribute(nd, "value_floats")) return std::vector<double>(a->floats().begin(), a->floats().end());
  if (const auto* a = find_attribute(nd, "value_float")) return std::vector<double>{a->f()};
  if (auto v = constant_int64s(view, value)) return std::vector<double>(v->begin(), v->end());
  return std::nullopt;
}

}  // namespace hpcnn::onnxu
