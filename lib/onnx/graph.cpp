#include "onnx/graph.h"

#include <algorithm>
#include <climits>
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

// Inserts `u` into `uses`, kept in node order, each node's inputs in order, subgraph reads last.
void insert_use(std::vector<Use>& uses, Use u) {
  auto key = [](const Use& x) { return std::pair(x.node, x.input == Use::subgraph ? INT_MAX : x.input); };
  uses.insert(std::upper_bound(uses.begin(), uses.end(), u, [&](const Use& a, const Use& b) { return key(a) < key(b); }), u);
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
  subgraph_reads_.resize(n);
  for (int i = 0; i < n; ++i) {
    for (const auto& in : graph.node(i).input())
      if (!in.empty() && !defined(in))  // (empty: an omitted optional input)
        throw_error(ErrorKind::bad_input,
                    describe(i) + " reads '" + in + "', which no node, initializer or graph input defines (truncated model?)");
    add_uses(i);
    for (const auto& v : subgraph_reads_[i])
      if (!defined(v))
        throw_error(ErrorKind::bad_input,
                    describe(i) + " reads '" + v + "' inside a subgraph, which no node, initializer or graph input defines");
  }
  for (const auto& out : graph.output())
    if (!defined(out.name())) throw_error(ErrorKind::bad_input, "graph output '" + out.name() + "' is not produced by any node");
  compute_order();
}

std::vector<std::string> GraphView::reads_of(int node) const {
  std::vector<std::string> reads;
  std::unordered_set<std::string> seen;
  for (const auto* sg : subgraphs(graph_->node(node))) outer_reads(*sg, reads, seen);
  return reads;
}

void GraphView::add_uses(int node) {
  const auto& nd = graph_->node(node);
  for (int k = 0; k < nd.input_size(); ++k)
    if (!nd.input(k).empty()) insert_use(consumers_[nd.input(k)], {node, k});
  subgraph_reads_[node] = reads_of(node);
  for (const auto& v : subgraph_reads_[node]) insert_use(consumers_[v], {node, Use::subgraph});
}

void GraphView::remove_uses(int node) {
  auto drop = [&](const std::string& v, int input) {
    auto it = consumers_.find(v);
    if (it == consumers_.end()) return;
    auto& uses = it->second;
    uses.erase(std::remove_if(uses.begin(), uses.end(), [&](const Use& u) { return u.node == node && u.input == input; }),
               uses.end());
    if (uses.empty()) consumers_.erase(it);
  };
  const auto& nd = graph_->node(node);
  for (int k = 0; k < nd.input_size(); ++k)
    if (!nd.input(k).empty()) drop(nd.input(k), k);
  for (const auto& v : subgraph_reads_[node]) drop(v, Use::subgraph);
  subgraph_reads_[node].clear();
}

void GraphView::compute_order() const {
  // Kahn's algorithm, stable in file order.
  const int n = graph_->node_size();
  order_.clear();
  std::vector<int> indeg(n, 0);
  for (int i = 0; i < n; ++i) {
    for (const auto& in : graph_->node(i).input())
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
    for (const auto& out : graph_->node(i).output()) {
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
  order_valid_ = true;
}

const std::vector<int>& GraphView::topo_order() const {
  if (!order_valid_) compute_order();
  return order_;
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

// --- Graph -----------------------------------------------------------------------------------
namespace {

// Every value and node name defined in `g` and its subgraphs.
void collect_names(const onnx::GraphProto& g, std::unordered_set<std::string>& values, std::unordered_set<std::string>& nodes) {
  for (const auto& v : g.input()) values.insert(v.name());
  for (const auto& t : g.initializer()) values.insert(t.name());
  for (const auto& nd : g.node()) {
    if (!nd.name().empty()) nodes.insert(nd.name());
    for (const auto& o : nd.output())
      if (!o.empty()) values.insert(o);
    for (const auto* sg : subgraphs(nd)) collect_names(*sg, values, nodes);
  }
}

// Renames reads of the outer value `from` inside subgraph `g` (and deeper), unless `g` defines
// a value of that name itself.
void rename_outer_reads(onnx::GraphProto& g, const std::string& from, const std::string& to) {
  for (const auto& v : g.input())
    if (v.name() == from) return;
  for (const auto& t : g.initializer())
    if (t.name() == from) return;
  for (const auto& nd : g.node())
    for (const auto& o : nd.output())
      if (o == from) return;
  for (auto& nd : *g.mutable_node()) {
    for (auto& in : *nd.mutable_input())
      if (in == from) in = to;
    for (auto& a : *nd.mutable_attribute()) {
      if (a.has_g()) rename_outer_reads(*a.mutable_g(), from, to);
      for (auto& sg : *a.mutable_graphs()) rename_outer_reads(sg, from, to);
    }
  }
  for (auto& o : *g.mutable_output())
    if (o.name() == from) o.set_name(to);
}

bool has_graphs(const onnx::AttributeProto& a) { return a.has_g() || a.graphs_size() > 0; }

std::string describe_new(const onnx::NodeProto& nd) {
  return "new node " + (nd.name().empty() ? std::string() : "'" + nd.name() + "' ") + "(" + nd.op_type() + ")";
}

}  // namespace

Graph::Graph(onnx::ModelProto& model) : Graph(*model.mutable_graph(), model.ir_version()) {}

Graph::Graph(onnx::GraphProto& graph, int64_t ir_version) : GraphView(graph), g_(&graph), ir_version_(ir_version) {
  collect_names(graph, value_names_, node_names_);
}

void Graph::shift_nodes(int from, int delta) {
  for (auto& [v, p] : producer_)
    if (p >= from) p += delta;
  for (auto& [v, uses] : consumers_)
    for (auto& u : uses)
      if (u.node >= from) u.node += delta;
  for (auto& [name, i] : by_name_)
    if (i >= from) i += delta;
}

bool Graph::reaches(int from_node, int target) const {
  std::vector<char> seen(static_cast<size_t>(node_count()), 0);
  std::vector<int> todo{from_node};
  while (!todo.empty()) {
    const int i = todo.back();
    todo.pop_back();
    if (i == target) return true;
    if (seen[i]) continue;
    seen[i] = 1;
    for (const auto& out : node(i).output())
      if (!out.empty())
        for (const Use& u : consumers(out)) todo.push_back(u.node);
  }
  return false;
}

void Graph::sync_input_dims(const onnx::TensorProto& t) {
  for (auto& in : *g_->mutable_input()) {
    if (in.name() != t.name() || !in.type().has_tensor_type()) continue;
    auto* shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
    bool same = shape->dim_size() == t.dims_size();
    for (int i = 0; same && i < t.dims_size(); ++i)
      same = shape->dim(i).has_dim_value() && shape->dim(i).dim_value() == t.dims(i);
    if (same) continue;
    shape->clear_dim();
    for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
  }
}

const onnx::TensorProto& Graph::put_initializer(onnx::TensorProto tensor) {
  const std::string name = tensor.name();
  if (name.empty()) throw_error(ErrorKind::bad_input, "an initializer needs a name");
  for (auto& t : *g_->mutable_initializer())
    if (t.name() == name) {
      t = std::move(tensor);
      sync_input_dims(t);
      return t;
    }
  if (defined(name) || value_names_.count(name))
    throw_error(ErrorKind::bad_input, "cannot add initializer '" + name + "': the name is already defined");
  onnx::TensorProto* added = g_->add_initializer();
  *added = std::move(tensor);
  initializers_[name] = added;
  value_names_.insert(name);
  if (ir_version_ < 4) {  // IR version 3: every initializer is also a graph input
    auto* in = g_->add_input();
    in->set_name(name);
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(added->data_type());
    auto* shape = tt->mutable_shape();
    for (int64_t d : added->dims()) shape->add_dim()->set_dim_value(d);
    inputs_.insert(name);
  }
  return *added;
}

void Graph::remove_initializer(const std::string& name) {
  if (!initializers_.count(name)) throw_error(ErrorKind::bad_input, "cannot remove initializer '" + name + "': there is none");
  if (!consumers(name).empty())
    throw_error(ErrorKind::bad_input,
                "cannot remove initializer '" + name + "': " + describe(consumers(name)[0].node) + " reads it");
  if (is_graph_output(name)) throw_error(ErrorKind::bad_input, "cannot remove initializer '" + name + "': it is a graph output");
  auto* inits = g_->mutable_initializer();
  for (int i = 0; i < inits->size(); ++i)
    if (inits->Get(i).name() == name) {
      inits->DeleteSubrange(i, 1);
      break;
    }
  initializers_.erase(name);
  value_names_.erase(name);
  auto* ins = g_->mutable_input();
  for (int i = 0; i < ins->size(); ++i)
    if (ins->Get(i).name() == name) {
      ins->DeleteSubrange(i, 1);
      inputs_.erase(name);
      break;
    }
}

void Graph::edit_constant(const ConstantRef& ref, const std::function<void(onnx::TensorProto&)>& edit) {
  onnx::TensorProto* t = nullptr;
  if (ref.kind == ConstantRef::Kind::initializer) {
    for (auto& x : *g_->mutable_initializer())
      if (x.name() == ref.name) t = &x;
  } else if (ref.kind == ConstantRef::Kind::constant_node && producer(ref.name) == ref.node) {
    for (auto& a : *g_->mutable_node(ref.node)->mutable_attribute())
      if (a.name() == "value" && a.has_t()) t = a.mutable_t();
  }
  if (!t) throw_error(ErrorKind::bad_input, "constant '" + ref.name + "' has no tensor to edit");
  const std::string name = t->name();
  edit(*t);
  if (t->name() != name) {
    t->set_name(name);
    throw_error(ErrorKind::bad_input, "an edit of constant '" + ref.name + "' may not rename its tensor");
  }
  if (ref.kind == ConstantRef::Kind::initializer) sync_input_dims(*t);
}

int Graph::insert_node(int position, onnx::NodeProto nd) {
  const std::string who = describe_new(nd);
  if (position < 0 || position > node_count())
    throw_error(ErrorKind::bad_input, "cannot insert " + who + " at index " + std::to_string(position) + " of " +
                                          std::to_string(node_count()) + " nodes");
  for (const auto& in : nd.input())
    if (!in.empty() && !defined(in)) throw_error(ErrorKind::bad_input, who + " reads '" + in + "', which is not defined");
  std::vector<std::string> reads;
  std::unordered_set<std::string> seen;
  for (const auto* sg : subgraphs(nd)) outer_reads(*sg, reads, seen);
  for (const auto& v : reads)
    if (!defined(v)) throw_error(ErrorKind::bad_input, who + " reads '" + v + "' inside a subgraph, which is not defined");
  std::unordered_set<std::string> new_values, new_nodes;
  for (const auto* sg : subgraphs(nd)) collect_names(*sg, new_values, new_nodes);
  for (const auto& o : nd.output())
    if (!o.empty() && !new_values.insert(o).second) throw_error(ErrorKind::bad_input, who + " produces '" + o + "' twice");
  for (const auto& v : new_values)
    if (defined(v) || value_names_.count(v))
      throw_error(ErrorKind::bad_input, who + " defines '" + v + "', which is already defined");

  onnx::NodeProto* added = g_->add_node();
  *added = std::move(nd);
  for (int i = node_count() - 1; i > position; --i) g_->mutable_node()->SwapElements(i, i - 1);
  shift_nodes(position, 1);
  subgraph_reads_.insert(subgraph_reads_.begin() + position, std::vector<std::string>{});
  const auto& n = node(position);
  for (const auto& o : n.output())
    if (!o.empty()) producer_[o] = position;
  if (!n.name().empty()) {
    auto [it, fresh] = by_name_.emplace(n.name(), position);
    if (!fresh && it->second > position) it->second = position;
    node_names_.insert(n.name());
  }
  value_names_.insert(new_values.begin(), new_values.end());
  node_names_.insert(new_nodes.begin(), new_nodes.end());
  add_uses(position);
  order_valid_ = false;
  return position;
}

void Graph::remove_node(int i) {
  if (i < 0 || i >= node_count())
    throw_error(ErrorKind::bad_input, "cannot remove node #" + std::to_string(i) + ": no such node");
  for (const auto& o : node(i).output()) {
    if (o.empty()) continue;
    if (!consumers(o).empty())
      throw_error(ErrorKind::bad_input,
                  "cannot remove " + describe(i) + ": " + describe(consumers(o)[0].node) + " reads its output '" + o + "'");
    if (is_graph_output(o))
      throw_error(ErrorKind::bad_input, "cannot remove " + describe(i) + ": its output '" + o + "' is a graph output");
  }
  remove_uses(i);
  for (const auto& o : node(i).output()) {
    producer_.erase(o);
    value_names_.erase(o);
  }
  const std::string name = node(i).name();
  auto named = by_name_.find(name);
  const bool renamed = named != by_name_.end() && named->second == i;
  if (renamed) by_name_.erase(named);
  g_->mutable_node()->DeleteSubrange(i, 1);
  subgraph_reads_.erase(subgraph_reads_.begin() + i);
  shift_nodes(i + 1, -1);
  if (renamed)  // another node of the same name, if any, is now the first
    for (int k = 0; k < node_count(); ++k)
      if (node(k).name() == name) {
        by_name_.emplace(name, k);
        break;
      }
  order_valid_ = false;
}

void Graph::set_input(int n, int input, const std::string& value) {
  if (n < 0 || n >= node_count() || input < 0 || input >= node(n).input_size())
    throw_error(ErrorKind::bad_input,
                "cannot set input " + std::to_string(input) + " of node #" + std::to_string(n) + ": no such input");
  if (!value.empty()) {
    if (!defined(value)) throw_error(ErrorKind::bad_input, describe(n) + " cannot read '" + value + "': it is not defined");
    const int p = producer(value);
    if (p >= 0 && reaches(n, p))
      throw_error(ErrorKind::bad_input, describe(n) + " cannot read '" + value + "': that would make a cycle");
  }
  remove_uses(n);
  g_->mutable_node(n)->set_input(input, value);
  add_uses(n);
  order_valid_ = false;
}

void Graph::set_attribute(int n, const onnx::AttributeProto& attribute) {
  if (n < 0 || n >= node_count())
    throw_error(ErrorKind::bad_input, "cannot set an attribute of node #" + std::to_string(n) + ": no such node");
  auto* attrs = g_->mutable_node(n)->mutable_attribute();
  onnx::AttributeProto* slot = nullptr;
  for (auto& a : *attrs)
    if (a.name() == attribute.name()) slot = &a;
  const bool graphs = has_graphs(attribute) || (slot && has_graphs(*slot));
  if (has_graphs(attribute)) {
    std::vector<std::string> reads;
    std::unordered_set<std::string> seen;
    if (attribute.has_g()) outer_reads(attribute.g(), reads, seen);
    for (const auto& sg : attribute.graphs()) outer_reads(sg, reads, seen);
    std::unordered_set<std::string> inner_values, inner_nodes;
    if (attribute.has_g()) collect_names(attribute.g(), inner_values, inner_nodes);
    for (const auto& sg : attribute.graphs()) collect_names(sg, inner_values, inner_nodes);
    for (const auto& v : inner_values)
      if (defined(v))
        throw_error(ErrorKind::bad_input, describe(n) + " would define '" + v + "' inside a subgraph, which is already defined");
    for (const auto& v : reads) {
      if (!defined(v))
        throw_error(ErrorKind::bad_input, describe(n) + " would read '" + v + "' inside a subgraph, which is not defined");
      const int p = producer(v);
      if (p >= 0 && reaches(n, p))
        throw_error(ErrorKind::bad_input, describe(n) + " would read '" + v + "' inside a subgraph: that would make a cycle");
    }
  }
  if (graphs) remove_uses(n);
  if (slot)
    *slot = attribute;
  else
    *attrs->Add() = attribute;
  if (graphs) {
    add_uses(n);
    for (const auto* sg : subgraphs(node(n))) collect_names(*sg, value_names_, node_names_);
    order_valid_ = false;
  }
}

void Graph::set_attribute_int(int n, const std::string& name, int64_t value) {
  if (n < 0 || n >= node_count())
    throw_error(ErrorKind::bad_input, "cannot set an attribute of node #" + std::to_string(n) + ": no such node");
  for (auto& a : *g_->mutable_node(n)->mutable_attribute())
    if (a.name() == name) {
      if (has_graphs(a)) throw_error(ErrorKind::bad_input, describe(n) + ": attribute '" + name + "' holds a graph, not an INT");
      a.set_i(value);
      return;
    }
  auto* a = g_->mutable_node(n)->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

void Graph::rename_reads(int n, const std::string& from, const std::string& to) {
  for (auto& in : *g_->mutable_node(n)->mutable_input())
    if (in == from) in = to;
  for (auto& a : *g_->mutable_node(n)->mutable_attribute()) {
    if (a.has_g()) rename_outer_reads(*a.mutable_g(), from, to);
    for (auto& sg : *a.mutable_graphs()) rename_outer_reads(sg, from, to);
  }
}

void Graph::replace_uses(const std::string& from, const std::string& to) {
  if (from == to) return;
  if (!defined(to)) throw_error(ErrorKind::bad_input, "cannot read '" + to + "' instead of '" + from + "': it is not defined");
  std::vector<int> readers;
  for (const Use& u : consumers(from))
    if (readers.empty() || readers.back() != u.node) readers.push_back(u.node);
  const int p = producer(to);
  for (int r : readers)
    if (p >= 0 && reaches(r, p))
      throw_error(ErrorKind::bad_input,
                  describe(r) + " cannot read '" + to + "' instead of '" + from + "': that would make a cycle");
  for (int r : readers) {
    remove_uses(r);
    rename_reads(r, from, to);
    add_uses(r);
  }
  for (auto& o : *g_->mutable_output())
    if (o.name() == from) o.set_name(to);
  if (outputs_.erase(from)) outputs_.insert(to);
  order_valid_ = false;
}

void Graph::rename_value(const std::string& from, const std::string& to) {
  if (!defined(from)) throw_error(ErrorKind::bad_input, "cannot rename '" + from + "': it is not defined");
  if (to.empty() || defined(to) || value_names_.count(to))
    throw_error(ErrorKind::bad_input, "cannot rename '" + from + "' to '" + to + "': the name is taken");
  std::vector<int> readers;
  for (const Use& u : consumers(from))
    if (readers.empty() || readers.back() != u.node) readers.push_back(u.node);
  for (int r : readers) remove_uses(r);
  if (const int p = producer(from); p >= 0) {
    for (auto& o : *g_->mutable_node(p)->mutable_output())
      if (o == from) o = to;
    producer_.erase(from);
    producer_[to] = p;
  }
  if (auto it = initializers_.find(from); it != initializers_.end()) {
    const onnx::TensorProto* t = it->second;
    for (auto& x : *g_->mutable_initializer())
      if (&x == t) x.set_name(to);
    initializers_.erase(it);
    initializers_[to] = t;
  }
  auto rename_infos = [&](google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* infos) {
    for (auto& v : *infos)
      if (v.name() == from) v.set_name(to);
  };
  rename_infos(g_->mutable_input());
  rename_infos(g_->mutable_output());
  rename_infos(g_->mutable_value_info());
  if (inputs_.erase(from)) inputs_.insert(to);
  if (outputs_.erase(from)) outputs_.insert(to);
  for (int r : readers) {
    rename_reads(r, from, to);
    add_uses(r);
  }
  value_names_.erase(from);
  value_names_.insert(to);
}

std::string Graph::unique_value_name(const std::string& base) {
  std::string name = base;
  for (int i = 1; value_names_.count(name) || reserved_.count(name) || defined(name); ++i) name = base + "_" + std::to_string(i);
  reserved_.insert(name);
  return name;
}

std::string Graph::unique_node_name(const std::string& base) {
  std::string name = base;
  for (int i = 1; node_names_.count(name) || reserved_nodes_.count(name); ++i) name = base + "_" + std::to_string(i);
  reserved_nodes_.insert(name);
  return name;
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

onnx::TensorProto* mutable_constant_tensor(onnx::GraphProto& graph, const std::string& value) {
  for (auto& t : *graph.mutable_initializer())
    if (t.name() == value) return &t;
  for (auto& n : *graph.mutable_node())
    if (n.op_type() == "Constant" && n.output_size() == 1 && n.output(0) == value)
      for (auto& a : *n.mutable_attribute())
        if (a.name() == "value" && a.has_t()) return a.mutable_t();
  return nullptr;
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
