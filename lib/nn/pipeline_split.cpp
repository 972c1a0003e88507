// split_pipeline(): the graph cut of nn/pipeline.h.
#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "core/error.h"
#include "nn/pipeline.h"
#include "onnx/costs.h"
#include "onnx/graph.h"
#include "onnx/shapes.h"

namespace hpcnn::nn {

int64_t CrossingValue::sample_elements() const {
  int64_t n = 1;
  for (int64_t d : sample_dims) n *= d;
  return n;
}

uint64_t PipelineSplit::cut_bytes_per_sample(size_t cut) const {
  uint64_t b = 0;
  for (const auto& v : stages.at(cut).outputs) b += static_cast<uint64_t>(v.sample_elements()) * sizeof(float);
  return b;
}

namespace {

std::string node_label(const onnx::NodeProto& n, int i) {
  return n.name().empty() ? "node #" + std::to_string(i) + " (" + n.op_type() + ")" : n.name();
}

struct Plan {
  const onnx::ModelProto& model;
  const std::string& origin;
  onnxu::GraphView view;
  onnxu::ShapeMap shapes;
  std::vector<int> compute;                  // node indices (no Constant nodes), topological order
  std::map<std::string, int> position;       // value -> position in `compute` of its producer (-1: graph input)
  std::vector<std::string> order;            // crossing candidates in their fixed order
  std::map<std::string, int> last_use;       // value -> last position reading it (compute.size(): a graph output)

  Plan(const onnx::ModelProto& m, const std::string& o) : model(m), origin(o), view(m.graph()), shapes(onnxu::infer_shapes(m)) {
    for (const auto& in : m.graph().input())
      if (!view.initializer(in.name())) {
        position[in.name()] = -1;
        order.push_back(in.name());
      }
    for (int i : view.topo_order()) {
      const auto& nd = view.node(i);
      if (nd.op_type() == "Constant") continue;
      const int p = static_cast<int>(compute.size());
      compute.push_back(i);
      for (const auto& out : nd.output())
        if (!out.empty()) {
          position[out] = p;
          order.push_back(out);
        }
      auto read = [&](const std::string& v) {
        if (position.count(v)) last_use[v] = std::max(last_use.count(v) ? last_use[v] : -1, p);
      };
      for (const auto& in : nd.input()) read(in);
      for (const auto& v : view.subgraph_reads(i)) read(v);
    }
    for (const auto& out : m.graph().output())
      if (position.count(out.name())) last_use[out.name()] = static_cast<int>(compute.size());
  }

  int n() const { return static_cast<int>(compute.size()); }

  // The values crossing the cut before position c, in the fixed order.
  std::vector<std::string> crossing(int c) const {
    std::vector<std::string> out;
    for (const auto& v : order) {
      auto u = last_use.find(v);
      if (position.at(v) < c && u != last_use.end() && u->second >= c) out.push_back(v);
    }
    return out;
  }

  // Whether `v` is an activation [N, ...] with known per-sample dims (then in `dims`).
  bool activation(const std::string& v, std::vector<int64_t>& dims) const {
    auto it = shapes.find(v);
    if (it == shapes.end() || it->second.size() < 2) return false;
    dims.assign(it->second.begin() + 1, it->second.end());
    return std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d > 0; });
  }

  // The first crossing value of cut c that is not an activation ("" if none).
  std::string bad_crossing(int c) const {
    std::vector<int64_t> dims;
    for (const auto& v : crossing(c))
      if (!activation(v, dims)) return v;
    return "";
  }

  uint64_t crossing_bytes(int c) const {
    uint64_t b = 0;
    std::vector<int64_t> dims;
    for (const auto& v : crossing(c))
      if (activation(v, dims)) {
        int64_t e = 1;
        for (int64_t d : dims) e *= d;
        b += static_cast<uint64_t>(e) * sizeof(float);
      }
    return b;
  }
};

// Cut positions (P - 1 increasing positions in 1..n-1) minimising the largest stage's MACs, then
// the bytes crossing the cuts; only positions where every crossing value is an activation.
std::vector<int> balance(const Plan& plan, int P) {
  const int n = plan.n();
  std::vector<int64_t> prefix(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + onnxu::node_macs(plan.view, plan.shapes, plan.compute[i]);
  std::vector<bool> valid(static_cast<size_t>(n) + 1, false);
  std::vector<uint64_t> bytes(static_cast<size_t>(n) + 1, 0);
  for (int c = 1; c < n; ++c) {
    valid[c] = plan.bad_crossing(c).empty();
    if (valid[c]) bytes[c] = plan.crossing_bytes(c);
  }
  valid[0] = valid[n] = true;
  using Cost = std::pair<int64_t, uint64_t>;  // (largest stage MACs, crossing bytes)
  const Cost inf{std::numeric_limits<int64_t>::max(), 0};
  // best[k][i]: the first i nodes in k stages; from[k][i]: where the k-th stage starts.
  std::vector<std::vector<Cost>> best(static_cast<size_t>(P) + 1, std::vector<Cost>(static_cast<size_t>(n) + 1, inf));
  std::vector<std::vector<int>> from(static_cast<size_t>(P) + 1, std::vector<int>(static_cast<size_t>(n) + 1, -1));
  best[0][0] = {0, 0};
  for (int k = 1; k <= P; ++k)
    for (int i = k; i <= n; ++i) {
      if (!valid[i] || (k == P && i != n)) continue;
      for (int j = k - 1; j < i; ++j) {
        if (best[k - 1][j] == inf || !valid[j]) continue;
        const Cost c{std::max(best[k - 1][j].first, prefix[i] - prefix[j]), best[k - 1][j].second + (i < n ? bytes[i] : 0)};
        if (c < best[k][i]) {
          best[k][i] = c;
          from[k][i] = j;
        }
      }
    }
  if (best[P][n] == inf)
    throw_error(ErrorKind::usage, plan.origin + ": no cut into " + std::to_string(P) +
                                      " stages has only activations crossing it (name the cut tensors: parallel.pipeline_cuts)");
  std::vector<int> cuts;
  for (int k = P, i = n; k > 1; --k) {
    i = from[k][i];
    cuts.push_back(i);
  }
  std::reverse(cuts.begin(), cuts.end());
  return cuts;
}

std::vector<int> named_cuts(const Plan& plan, int P, const std::vector<std::string>& names) {
  if (static_cast<int>(names.size()) != P - 1)
    throw_error(ErrorKind::usage, std::to_string(P) + " pipeline stages need " + std::to_string(P - 1) + " cut tensor(s) (parallel.pipeline_cuts), " +
                                      std::to_string(names.size()) + " given");
  std::vector<int> cuts;
  for (size_t k = 0; k < names.size(); ++k) {
    const std::string& v = names[k];
    if (!plan.view.defined(v))
      throw_error(ErrorKind::usage, "pipeline cut tensor '" + v + "' does not exist in " + plan.origin);
    auto it = plan.position.find(v);
    if (it == plan.position.end() || it->second < 0)
      throw_error(ErrorKind::usage, "pipeline cut tensor '" + v + "' of " + plan.origin +
                                        " is not produced by a node (a graph input, an initializer or a Constant): nothing to cut after");
    const int c = it->second + 1;
    if (c >= plan.n())
      throw_error(ErrorKind::usage, "pipeline cut after '" + v + "' leaves stage " + std::to_string(k + 1) + " of " + plan.origin +
                                        " empty: it is the output of the last node");
    if (!cuts.empty() && c <= cuts.back())
      throw_error(ErrorKind::usage, "pipeline cut after '" + v + "' leaves stage " + std::to_string(k) + " of " + plan.origin +
                                        " empty: it is produced before or by the node of the previous cut '" + names[k - 1] +
                                        "' (name the cuts in graph order, each after the last)");
    const std::string bad = plan.bad_crossing(c);
    if (!bad.empty())
      throw_error(ErrorKind::usage, "pipeline cut after '" + v + "' of " + plan.origin + ": the value '" + bad +
                                        "' would cross it, and only activations [N, ...] with known per-sample dims can");
    cuts.push_back(c);
  }
  return cuts;
}

onnx::ValueInfoProto value_info(const std::string& name, const std::vector<int64_t>& sample_dims) {
  onnx::ValueInfoProto vi;
  vi.set_name(name);
  auto* t = vi.mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  auto* s = t->mutable_shape();
  s->add_dim()->set_dim_param("N");
  for (int64_t d : sample_dims) s->add_dim()->set_dim_value(d);
  return vi;
}

PipelineStage make_stage(const Plan& plan, int s, int P, int begin, int end) {
  const onnx::GraphProto& g = plan.model.graph();
  PipelineStage st;
  st.nodes = end - begin;
  st.first_node = node_label(plan.view.node(plan.compute[begin]), plan.compute[begin]);
  st.last_node = node_label(plan.view.node(plan.compute[end - 1]), plan.compute[end - 1]);
  st.model = plan.model;
  onnx::GraphProto* out = st.model.mutable_graph();
  out->clear_node();
  out->clear_input();
  out->clear_output();
  out->clear_initializer();
  out->clear_value_info();
  out->set_name(g.name() + "_stage" + std::to_string(s));

  std::set<std::string> read;  // values the stage's nodes read
  for (int p = begin; p < end; ++p) {
    const int i = plan.compute[p];
    for (const auto& in : plan.view.node(i).input()) read.insert(in);
    for (const auto& v : plan.view.subgraph_reads(i)) read.insert(v);
  }
  // Constant nodes it reads, then its range.
  for (int i : plan.view.topo_order()) {
    const auto& nd = plan.view.node(i);
    if (nd.op_type() != "Constant") continue;
    if (std::any_of(nd.output().begin(), nd.output().end(), [&](const std::string& o) { return read.count(o) > 0; }))
      *out->add_node() = nd;
  }
  for (int p = begin; p < end; ++p) {
    const int i = plan.compute[p];
    st.macs += onnxu::node_macs(plan.view, plan.shapes, i);
    *out->add_node() = plan.view.node(i);
  }
  for (const auto& t : g.initializer())
    if (read.count(t.name())) *out->add_initializer() = t;

  std::vector<int64_t> dims;
  for (const auto& v : plan.crossing(begin)) {
    if (!plan.activation(v, dims)) {
      // The graph input of stage 0 may have unknown dims: take its declared type as it is.
      for (const auto& in : g.input())
        if (in.name() == v) *out->add_input() = in;
      st.inputs.push_back({v, {}});
      continue;
    }
    *out->add_input() = value_info(v, dims);
    st.inputs.push_back({v, dims});
  }
  if (s == P - 1) {
    for (const auto& o : g.output()) {
      *out->add_output() = o;
      plan.activation(o.name(), dims);
      st.outputs.push_back({o.name(), dims});
      st.output_values.push_back(o.name());
    }
    return st;
  }
  std::set<std::string> inputs;
  for (const auto& v : st.inputs) inputs.insert(v.name);
  for (const auto& v : plan.crossing(end)) {
    plan.activation(v, dims);
    std::string value = v;
    if (inputs.count(v)) {  // only passed on: an Identity gives the stage an output of its own
      value = v + "__pipeline_stage" + std::to_string(s);
      auto* id = out->add_node();
      id->set_op_type("Identity");
      id->set_name(value);
      id->add_input(v);
      id->add_output(value);
    }
    *out->add_output() = value_info(value, dims);
    st.outputs.push_back({v, dims});
    st.output_values.push_back(value);
  }
  return st;
}

}  // namespace

PipelineSplit split_pipeline(const onnx::ModelProto& model, const std::string& origin, int P, const std::vector<std::string>& cut_names) {
  if (P < 1) throw_error(ErrorKind::usage, "parallel.pipeline must be at least 1 (got " + std::to_string(P) + ")");
  Plan plan(model, origin);
  if (P > plan.n())
    throw_error(ErrorKind::usage, "parallel.pipeline " + std::to_string(P) + " is larger than the " + std::to_string(plan.n()) +
                                      " nodes of " + origin + " (Constant nodes not counted): a stage would be empty");
  PipelineSplit split;
  split.named = !cut_names.empty();
  std::vector<int> cuts = split.named ? named_cuts(plan, P, cut_names) : balance(plan, P);
  cuts.insert(cuts.begin(), 0);
  cuts.push_back(plan.n());
  // A parameter read by two stages would be updated twice, apart: refused.
  std::map<std::string, int> owner;
  for (int s = 0; s < P; ++s) {
    split.stages.push_back(make_stage(plan, s, P, cuts[s], cuts[s + 1]));
    for (const auto& t : split.stages.back().model.graph().initializer()) {
      if (t.data_type() != onnx::TensorProto::FLOAT || t.dims_size() == 0) continue;
      auto [it, fresh] = owner.emplace(t.name(), s);
      if (!fresh)
        throw_error(ErrorKind::usage, origin + ": the initializer '" + t.name() + "' is read in pipeline stages " +
                                          std::to_string(it->second) + " and " + std::to_string(s) +
                                          " (a weight shared across a cut is not supported; move the cut)");
    }
  }
  return split;
}

}  // namespace hpcnn::nn
