// The graph executor: planning (constant folding, layer binding, parameters, lifetimes) and
// forward/backward runs.
#include "nn/model.h"

#include <map>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/error.h"
#include "nn/layer.h"
#include "nn/proto_tensor.h"
#include "onnx/graph.h"
#include "onnx/model.h"
#include "onnx/op_facts.h"
#include "ops/binary.h"

namespace hpcnn::nn {

using detail::Layer;
using detail::Value;

struct Model::Impl {
  struct Step {
    std::string desc;
    std::string op;
    std::unique_ptr<Layer> layer;
    std::vector<int> in, out;               // value ids (-1: omitted optional input)
    bool backward = false;                  // some input requires a gradient
    const onnx::NodeProto* node = nullptr;  // while planning only
  };
  void fuse_sparse_fcl();

  std::string origin;
  ModelOptions options;
  int64_t opset = 0;
  std::vector<std::string> names;  // value id -> name
  std::unordered_map<std::string, int> ids;
  std::vector<Value> constants;  // by value id (undefined if not constant)
  std::vector<Step> steps;
  std::vector<std::string> input_names, output_names;
  std::vector<int> input_ids, output_ids;
  std::vector<Parameter> params;
  std::vector<int> param_ids;
  std::vector<Buffer> buffers;
  std::vector<int> buffer_ids;
  std::vector<bool> requires_grad, keep_for_backward, pinned;
  std::vector<int> last_use;
  std::vector<int> first_keep;  // earliest step whose backward needs the value (-1: none)
  std::map<std::string, int> op_counts;
  int folded = 0;
  std::vector<int> param_first_step;  // per parameter: earliest step whose backward adds to its gradient (-1: none)
  std::vector<BatchNormLayer> bn_layers;
  std::vector<int> bn_of_step;  // per step: its index in bn_layers, or -1
  BatchNormStatistics bn_treatment = BatchNormStatistics::running_update;
  std::vector<std::vector<ChannelMoments>> bn_deferred;
  std::vector<ChannelMoments> bn_collected;
  std::function<void(size_t)> gradient_ready;

  // run state
  std::vector<Value> vals;
  std::vector<Shape> input_shapes;  // of the last forward()
  bool trained_forward = false;
  std::vector<Tensor> in_grads;
  std::mt19937_64 rng;

  int id_of(const std::string& name) {
    auto it = ids.find(name);
    if (it != ids.end()) return it->second;
    const int id = static_cast<int>(names.size());
    names.push_back(name);
    ids.emplace(name, id);
    constants.emplace_back();
    return id;
  }

  void plan(const onnx::ModelProto& model);
  // plan()'s phases, in order.
  void declare_inputs_and_outputs(const onnx::GraphProto& g,
                                  const std::unordered_map<std::string, const onnx::TensorProto*>& inits);
  std::unordered_map<int, const onnx::TensorProto*> read_initializers(
      const std::unordered_map<std::string, const onnx::TensorProto*>& inits);
  std::vector<int> bind_steps(const onnx::GraphProto& g, const onnxu::GraphView& view,
                              const std::unordered_map<int, const onnx::TensorProto*>& init_of);
  void collect_parameters_and_buffers(const onnx::GraphProto& g, const std::vector<int>& role);
  void mark_gradients();
  void find_gradient_ready_steps();
  void find_batchnorm_steps();
  void plan_value_lifetimes();
  void check_outputs_produced();
  // A training-mode forward's moments of batchnorm layer l, treated per bn_treatment.
  void batch_moments(size_t l, const ChannelMoments& b);
  void add_param_grad(size_t k, const Tensor& g);
  void running_update(size_t l, const std::vector<double>& mean, const std::vector<double>& var, bool blend);
};

void Model::Impl::batch_moments(size_t l, const ChannelMoments& b) {
  switch (bn_treatment) {
    case BatchNormStatistics::running_update:
      running_update(l, b.mean, b.variance(), true);
      break;
    case BatchNormStatistics::deferred:
      bn_deferred.back()[l] = b;
      break;
    case BatchNormStatistics::collect:
      if (bn_collected.size() != bn_layers.size()) bn_collected.assign(bn_layers.size(), {});
      bn_collected[l].merge(b);
      break;
  }
}

void Model::Impl::add_param_grad(size_t k, const Tensor& g) {
  if (!g.defined()) return;
  const Tensor gp = to_layout(g, Layout::plain);
  Parameter& p = params[k];
  float* d = p.grad.data();
  const float* src = gp.data();
  for (int64_t i = 0; i < p.grad.numel(); ++i) d[i] += src[i];
}

void Model::Impl::running_update(size_t l, const std::vector<double>& mean, const std::vector<double>& var, bool blend) {
  const BatchNormLayer& L = bn_layers.at(l);
  float* rm = buffers[L.mean_buffer].value.data();
  float* rv = buffers[L.var_buffer].value.data();
  if (static_cast<int64_t>(mean.size()) != L.channels || static_cast<int64_t>(var.size()) != L.channels)
    throw_error(ErrorKind::bad_input,
                "statistics of " + std::to_string(mean.size()) + " channels for " + L.node + " of " + std::to_string(L.channels));
  const float mo = blend ? L.momentum : 0.0f;
  for (int64_t c = 0; c < L.channels; ++c) {
    rm[c] = mo * rm[c] + (1 - mo) * static_cast<float>(mean[c]);
    rv[c] = mo * rv[c] + (1 - mo) * static_cast<float>(var[c]);
  }
}

namespace {
std::string describe(const onnx::NodeProto& node, int index) {
  return "node " + (node.name().empty() ? "#" + std::to_string(index) : "'" + node.name() + "'") + " (" + node.op_type() + ")";
}
}  // namespace

// Conv 1x1 -> Flatten (axis 1) -> Gemm (transB 1) with constant weights, each value read once and
// by the next step only: the structured sparse FCL that sparsify-fcl writes (Matsumura et al.,
// CCPE 2021), run as one op (ops/sparse_fcl.h) in the Conv's place.
void Model::Impl::fuse_sparse_fcl() {
  std::vector<int> readers(names.size(), 0);
  for (const auto& st : steps)
    for (int id : st.in)
      if (id >= 0) ++readers[id];
  for (int id : output_ids) readers[id] += 2;  // a graph output is never fused away
  auto next_reader = [&](size_t from, int value) -> int {
    for (size_t j = from + 1; j < steps.size(); ++j)
      for (int id : steps[j].in)
        if (id == value) return static_cast<int>(j);
    return -1;
  };
  auto is_const = [&](int id) { return id >= 0 && constants[id].defined() && !constants[id].is_int; };
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& conv = steps[i];
    if (conv.op != "Conv" || conv.out.size() != 1 || readers[conv.out[0]] != 1 || conv.in.size() < 2 || !is_const(conv.in[1]))
      continue;
    const onnx::NodeProto& cn = *conv.node;
    const Tensor& w = constants[conv.in[1]].t;
    if (w.rank() != 4 || w.dim(2) != 1 || w.dim(3) != 1 || onnxu::attr_int(cn, "group", 1) != 1) continue;
    bool plain = true;
    for (const char* a : {"strides", "dilations"})
      for (int64_t v : onnxu::attr_ints(cn, a)) plain = plain && v == 1;
    for (int64_t v : onnxu::attr_ints(cn, "pads")) plain = plain && v == 0;
    if (!plain || (conv.in.size() > 2 && conv.in[2] >= 0 && !is_const(conv.in[2]))) continue;
    const int fi = next_reader(i, conv.out[0]);
    if (fi < 0) continue;
    const Step& flat = steps[fi];
    if (flat.op != "Flatten" || onnxu::attr_int(*flat.node, "axis", 1) != 1 || readers[flat.out[0]] != 1) continue;
    const int gi = next_reader(fi, flat.out[0]);
    if (gi < 0) continue;
    const Step& gemm = steps[gi];
    const onnx::NodeProto& gn = *gemm.node;
    if (gemm.op != "Gemm" || gemm.in.size() < 2 || gemm.in[0] != flat.out[0] || !is_const(gemm.in[1]) ||
        onnxu::attr_int(gn, "transA", 0) != 0 || onnxu::attr_int(gn, "transB", 0) != 1 ||
        onnxu::attr_float(gn, "alpha", 1.0f) != 1.0f || onnxu::attr_float(gn, "beta", 1.0f) != 1.0f)
      continue;
    const int bias = gemm.in.size() > 2 ? gemm.in[2] : -1;
    if (bias >= 0 &&
        (!is_const(bias) || constants[bias].t.rank() != 1 || constants[bias].t.dim(0) != constants[gemm.in[1]].t.dim(0)))
      continue;
    Step fused;
    fused.desc = "sparse FCL (" + conv.desc + " -> Flatten -> " + gemm.desc + ")";
    fused.op = "SparseFcl";
    fused.layer = detail::make_sparse_fcl_layer();
    fused.in = {conv.in[0], conv.in[1], conv.in.size() > 2 ? conv.in[2] : -1, gemm.in[1], bias};
    fused.out = gemm.out;
    for (const char* op : {"Conv", "Flatten", "Gemm"})
      if (--op_counts[op] == 0) op_counts.erase(op);
    ++op_counts["SparseFcl"];
    steps.erase(steps.begin() + gi);
    steps.erase(steps.begin() + fi);
    steps[i] = std::move(fused);
  }
}

// Planning a model, phase by phase (Model::Impl::plan calls them in this order).
void Model::Impl::plan(const onnx::ModelProto& model) {
  opset = onnxu::default_opset(model);
  const onnx::GraphProto& g = model.graph();
  onnxu::GraphView view(g);  // validates references, cycles; gives topological order
  std::unordered_map<std::string, const onnx::TensorProto*> inits;
  for (const auto& t : g.initializer()) inits[t.name()] = &t;
  declare_inputs_and_outputs(g, inits);
  const std::unordered_map<int, const onnx::TensorProto*> init_of = read_initializers(inits);
  std::vector<int> role = bind_steps(g, view, init_of);
  fuse_sparse_fcl();
  for (auto& st : steps) st.node = nullptr;
  collect_parameters_and_buffers(g, role);
  mark_gradients();
  find_gradient_ready_steps();
  find_batchnorm_steps();
  plan_value_lifetimes();
  check_outputs_produced();
}

// Runtime inputs and outputs are fp32 tensors: other declared element types are refused here
// (integer shape inputs must be initializers, so that they fold at load).
void Model::Impl::declare_inputs_and_outputs(const onnx::GraphProto& g,
                                             const std::unordered_map<std::string, const onnx::TensorProto*>& inits) {
  auto check_float = [&](const onnx::ValueInfoProto& vi, const char* what) {
    if (!vi.type().has_tensor_type()) {
      if (vi.has_type())
        throw_error(ErrorKind::unsupported, std::string(what) + " '" + vi.name() + "' of " + origin + " is not a tensor");
      return;
    }
    const int32_t et = vi.type().tensor_type().elem_type();
    if (et != onnx::TensorProto::FLOAT && et != onnx::TensorProto::UNDEFINED)
      throw_error(ErrorKind::unsupported,
                  std::string(what) + " '" + vi.name() + "' of " + origin + " has dtype " + onnxu::dtype_name(et) +
                      "; the engine runs fp32 only" +
                      (std::string(what) == "graph input" ? " (integer shape inputs must be initializers)" : ""));
  };
  for (const auto& vi : g.input())
    if (!inits.count(vi.name())) {
      check_float(vi, "graph input");
      input_names.push_back(vi.name());
      input_ids.push_back(id_of(vi.name()));
    }
  for (const auto& vi : g.output()) {
    check_float(vi, "graph output");
    output_names.push_back(vi.name());
    output_ids.push_back(id_of(vi.name()));
  }
}

// Initializer values (floats as tensors, integers as shape values), by value id.
std::unordered_map<int, const onnx::TensorProto*> Model::Impl::read_initializers(
    const std::unordered_map<std::string, const onnx::TensorProto*>& inits) {
  std::unordered_map<int, const onnx::TensorProto*> init_of;
  for (const auto& [name, t] : inits) {
    const int id = id_of(name);
    init_of[id] = t;
    with_context("while reading initializer '" + name + "' of " + origin, [&] {
      const int32_t dt = t->data_type();
      const bool is_float = dt == onnx::TensorProto::FLOAT || dt == onnx::TensorProto::DOUBLE || dt == onnx::TensorProto::FLOAT16;
      if (is_float) {
        constants[id] = Value::of(tensor_from_proto(*t));
      } else {
        try {
          constants[id] = detail::value_from_proto(*t);
        } catch (const Error&) {
          // Unusable dtype: only an error if something reads it (reported there).
        }
      }
      return 0;
    });
  }
  return init_of;
}

// Binds layers in topological order, folding shape arithmetic whose inputs are constant. Returns
// the role of each initializer id: 1 trainable, 2 buffer, 3 constant (0: not read by a step).
std::vector<int> Model::Impl::bind_steps(const onnx::GraphProto& g, const onnxu::GraphView& view,
                                         const std::unordered_map<int, const onnx::TensorProto*>& init_of) {
  std::vector<int> role(names.size(), 0);
  detail::RunContext fold_ctx;
  fold_ctx.rng = &rng;
  for (int ni : view.topo_order()) {
    const onnx::NodeProto& node = g.node(ni);
    const std::string desc = describe(node, ni);
    Step st;
    st.desc = desc + " of " + origin;
    st.op = node.op_type();
    st.node = &node;
    for (const auto& name : node.input()) st.in.push_back(name.empty() ? -1 : id_of(name));
    for (const auto& name : node.output()) st.out.push_back(id_of(name));
    if (role.size() < names.size()) role.resize(names.size(), 0);
    with_context("while loading " + st.desc, [&] {
      auto constant = [&](int i) -> const Value* {
        if (i >= static_cast<int>(st.in.size()) || st.in[i] < 0) return nullptr;
        const Value& v = constants[st.in[i]];
        return v.defined() ? &v : nullptr;
      };
      st.layer = detail::make_layer(node, opset, constant, options.slabs);
      bool all_const = true;
      for (int id : st.in)
        if (id >= 0 && !constants[id].defined()) all_const = false;
      // A foldable op is folded unless it reads a float initializer that is (or may become) a parameter.
      bool reads_float_init = false;
      for (int id : st.in)
        if (id >= 0 && init_of.count(id) && !constants[id].is_int) reads_float_init = true;
      if (detail::is_foldable(node.op_type()) && all_const && !reads_float_init) {
        std::vector<const Value*> in;
        for (int id : st.in) in.push_back(id >= 0 ? &constants[id] : nullptr);
        std::vector<Value> out(st.out.size());
        st.layer->forward(in, out, fold_ctx);
        for (size_t k = 0; k < st.out.size(); ++k) {
          if (constants.size() < names.size()) constants.resize(names.size());
          constants[st.out[k]] = out[k];
        }
        ++folded;
        return 0;
      }
      for (size_t i = 0; i < st.in.size(); ++i) {
        const int id = st.in[i];
        if (id < 0 || !init_of.count(id) || constants[id].is_int || !constants[id].defined()) continue;
        // The operator facts (onnx/op_facts.h) say which inputs hold parameters and buffers.
        const auto ir = onnxu::initializer_role(st.layer->signature(), static_cast<int>(i), constants[id].t.numel());
        const int r = ir == onnxu::InitializerRole::parameter ? 1 : ir == onnxu::InitializerRole::buffer ? 2 : 3;
        if (role[id] == 0 || r < role[id]) role[id] = r;  // trainable wins over constant
      }
      ++op_counts[node.op_type()];
      steps.push_back(std::move(st));
      return 0;
    });
  }
  if (role.size() < names.size()) role.resize(names.size(), 0);
  if (constants.size() < names.size()) constants.resize(names.size());
  return role;
}

// Parameters and buffers, in initializer order (for stable listings). BatchNormalization's scale
// is 1-D as well: no weight decay, as intended.
void Model::Impl::collect_parameters_and_buffers(const onnx::GraphProto& g, const std::vector<int>& role) {
  for (const auto& t : g.initializer()) {
    const int id = ids.at(t.name());
    if (role[id] == 1) {
      const bool bias_like = constants[id].t.rank() <= 1;
      params.push_back({t.name(), constants[id].t, Tensor::zeros(constants[id].t.shape()), bias_like});
      param_ids.push_back(id);
    } else if (role[id] == 2) {
      buffers.push_back({t.name(), constants[id].t});
      buffer_ids.push_back(id);
    }
  }
}

// Which values need a gradient, and which steps run backward.
void Model::Impl::mark_gradients() {
  requires_grad.assign(names.size(), false);
  for (int id : param_ids) requires_grad[id] = true;
  if (options.input_grads)
    for (int id : input_ids) requires_grad[id] = true;
  for (auto& st : steps) {
    bool any = false;
    for (size_t i = 0; i < st.in.size(); ++i)
      if (st.in[i] >= 0 && requires_grad[st.in[i]] && st.layer->differentiable_input(static_cast<int>(i))) any = true;
    st.backward = any;
    if (any && !st.out.empty()) requires_grad[st.out[0]] = true;
  }
}

// The earliest step whose backward contributes to each parameter's gradient (backward runs the
// steps in reverse, so after that step the gradient is final).
void Model::Impl::find_gradient_ready_steps() {
  std::unordered_map<int, size_t> param_index;
  for (size_t k = 0; k < param_ids.size(); ++k) param_index[param_ids[k]] = k;
  param_first_step.assign(param_ids.size(), -1);
  for (size_t s = steps.size(); s-- > 0;) {
    if (!steps[s].backward) continue;
    for (size_t i = 0; i < steps[s].in.size(); ++i) {
      auto it = param_index.find(steps[s].in[i]);
      if (it != param_index.end() && steps[s].layer->differentiable_input(static_cast<int>(i)))
        param_first_step[it->second] = static_cast<int>(s);
    }
  }
}

// BatchNormalization steps whose running statistics (mean, then variance) are this model's buffers.
void Model::Impl::find_batchnorm_steps() {
  std::unordered_map<int, size_t> buffer_index;
  for (size_t k = 0; k < buffer_ids.size(); ++k) buffer_index[buffer_ids[k]] = k;
  bn_of_step.assign(steps.size(), -1);
  for (size_t s = 0; s < steps.size(); ++s) {
    const auto& st = steps[s];
    const onnxu::Signature* sig = st.layer->signature();
    const int mi = sig ? sig->find(onnxu::Role::running_stat) : -1;
    const int vi = mi < 0 ? -1 : sig->find(onnxu::Role::running_stat, mi + 1);
    if (vi < 0 || vi >= static_cast<int>(st.in.size())) continue;
    auto mean = buffer_index.find(st.in[mi]), var = buffer_index.find(st.in[vi]);
    if (mean == buffer_index.end() || var == buffer_index.end()) continue;
    bn_of_step[s] = static_cast<int>(bn_layers.size());
    bn_layers.push_back(
        {st.desc, mean->second, var->second, st.layer->batchnorm_momentum(), buffers[mean->second].value.numel()});
  }
}

// Per value: whether backward needs it kept, the first step that keeps it, its last reader, and
// the graph outputs pinned.
void Model::Impl::plan_value_lifetimes() {
  const size_t n = names.size();
  keep_for_backward.assign(n, false);
  first_keep.assign(n, -1);
  last_use.assign(n, -1);
  pinned.assign(n, false);
  for (int id : output_ids) pinned[id] = true;
  for (size_t s = 0; s < steps.size(); ++s) {
    for (size_t i = 0; i < steps[s].in.size(); ++i) {
      const int id = steps[s].in[i];
      if (id < 0) continue;
      last_use[id] = static_cast<int>(s);
      if (steps[s].backward && steps[s].layer->keeps_input(static_cast<int>(i))) {
        keep_for_backward[id] = true;
        if (first_keep[id] < 0) first_keep[id] = static_cast<int>(s);
      }
    }
    for (size_t j = 0; j < steps[s].out.size(); ++j)
      if (steps[s].backward && steps[s].layer->keeps_output(static_cast<int>(j))) {
        const int id = steps[s].out[j];
        keep_for_backward[id] = true;
        if (first_keep[id] < 0) first_keep[id] = static_cast<int>(s);
      }
  }
}

// Every graph output must be computable.
void Model::Impl::check_outputs_produced() {
  for (size_t k = 0; k < output_ids.size(); ++k) {
    const int id = output_ids[k];
    bool produced = constants[id].defined();
    for (int in : input_ids) produced = produced || in == id;
    for (const auto& st : steps)
      for (int o : st.out) produced = produced || o == id;
    if (!produced)
      throw_error(ErrorKind::bad_input, "graph output '" + output_names[k] + "' of " + origin + " is never produced");
  }
}

Model::Model(const onnx::ModelProto& model, const std::string& origin, ModelOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->origin = origin;
  impl_->options = options;
  impl_->rng.seed(options.seed);
  impl_->plan(model);
}

Model Model::load(const std::string& path, ModelOptions options) {
  onnxu::Model m = onnxu::load_model(path);
  return Model(m.proto, path, options);
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

const std::vector<std::string>& Model::input_names() const { return impl_->input_names; }
const std::vector<std::string>& Model::output_names() const { return impl_->output_names; }
std::vector<Parameter>& Model::parameters() { return impl_->params; }
std::vector<Buffer>& Model::buffers() { return impl_->buffers; }
const std::vector<Tensor>& Model::input_grads() const { return impl_->in_grads; }

void Model::zero_grad() {
  for (auto& p : impl_->params) p.grad.zero();
}

std::vector<Tensor> Model::forward(const std::vector<Tensor>& inputs, Mode mode) {
  Impl& m = *impl_;
  if (inputs.size() != m.input_ids.size())
    throw_error(ErrorKind::usage,
                m.origin + " takes " + std::to_string(m.input_ids.size()) + " inputs, given " + std::to_string(inputs.size()));
  m.vals.assign(m.names.size(), Value{});
  for (size_t id = 0; id < m.constants.size(); ++id)
    if (m.constants[id].defined()) m.vals[id] = m.constants[id];
  for (size_t k = 0; k < m.param_ids.size(); ++k) m.vals[m.param_ids[k]] = Value::of(m.params[k].value);
  for (size_t k = 0; k < m.buffer_ids.size(); ++k) m.vals[m.buffer_ids[k]] = Value::of(m.buffers[k].value);
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].defined()) throw_error(ErrorKind::usage, "input '" + m.input_names[k] + "' of " + m.origin + " is undefined");
    m.vals[m.input_ids[k]] = Value::of(inputs[k]);
  }
  m.input_shapes.clear();
  for (const Tensor& t : inputs) m.input_shapes.push_back(t.shape());
  const bool training = mode == Mode::training;
  const bool keep = mode != Mode::inference;  // what backward() needs stays
  if (training && m.bn_treatment == BatchNormStatistics::deferred) m.bn_deferred.emplace_back(m.bn_layers.size());
  detail::RunContext ctx;
  ctx.mode = mode;
  ctx.rng = &m.rng;
  std::vector<const Value*> in;
  for (size_t s = 0; s < m.steps.size(); ++s) {
    auto& st = m.steps[s];
    in.clear();
    for (int id : st.in) in.push_back(id >= 0 && m.vals[id].defined() ? &m.vals[id] : nullptr);
    std::vector<Value> out(st.out.size());
    with_context("while running " + st.desc, [&] {
      st.layer->forward(in, out, ctx);
      return 0;
    });
    if (const ChannelMoments* bm = st.layer->take_batch_moments(); bm && m.bn_of_step[s] >= 0)
      m.batch_moments(static_cast<size_t>(m.bn_of_step[s]), *bm);
    for (size_t j = 0; j < st.out.size(); ++j) m.vals[st.out[j]] = std::move(out[j]);
    // Release values after their last use unless backward or the caller needs them.
    for (int id : st.in) {
      if (id < 0 || m.last_use[id] != static_cast<int>(s) || m.pinned[id] || m.constants[id].defined()) continue;
      if (keep && m.keep_for_backward[id]) continue;
      m.vals[id] = Value{};  // (parameters and buffers are constants: never released)
    }
  }
  std::vector<Tensor> outs;
  for (size_t k = 0; k < m.output_ids.size(); ++k) {
    const Value& v = m.vals[m.output_ids[k]];
    if (v.is_int) {
      Tensor t(v.int_shape);
      for (size_t i = 0; i < v.ints.size(); ++i) t.data()[i] = static_cast<float>(v.ints[i]);
      outs.push_back(t);
    } else {
      outs.push_back(to_layout(v.t, Layout::plain));
    }
  }
  m.trained_forward = keep;
  if (!keep) m.vals.clear();
  return outs;
}

namespace {
Tensor accumulate(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (a.shape() != b.shape())
    throw_error(ErrorKind::bad_input,
                "gradient shapes differ: " + shape_to_string(a.shape()) + " and " + shape_to_string(b.shape()));
  return ops::binary_forward(ops::BinaryOp::add, a, to_layout(b, a.layout()));
}
}  // namespace

void Model::backward(const std::vector<Tensor>& output_grads) {
  Impl& m = *impl_;
  if (!m.trained_forward)
    throw_error(ErrorKind::usage, "backward() of " + m.origin + " without a training- or inference_grad-mode forward()");
  if (output_grads.size() != m.output_ids.size())
    throw_error(ErrorKind::usage, m.origin + " has " + std::to_string(m.output_ids.size()) + " outputs, given " +
                                      std::to_string(output_grads.size()) + " gradients");
  std::vector<Tensor> grads(m.names.size());
  for (size_t k = 0; k < output_grads.size(); ++k) {
    if (!output_grads[k].defined()) continue;
    const Value& v = m.vals[m.output_ids[k]];
    if (!v.is_int && v.t.shape() != output_grads[k].shape())
      throw_error(ErrorKind::usage, "gradient of output '" + m.output_names[k] + "' has shape " +
                                        shape_to_string(output_grads[k].shape()) + ", the output " +
                                        shape_to_string(v.t.shape()));
    grads[m.output_ids[k]] = accumulate(grads[m.output_ids[k]], output_grads[k]);
  }
  std::vector<const Value*> in, out;
  std::vector<bool> announced(m.param_ids.size(), false);
  for (size_t s = m.steps.size(); s-- > 0;) {
    auto& st = m.steps[s];
    if (!st.backward || st.out.empty() || !grads[st.out[0]].defined()) continue;
    in.clear();
    out.clear();
    std::vector<bool> need(st.in.size(), false);
    for (size_t i = 0; i < st.in.size(); ++i) {
      const int id = st.in[i];
      in.push_back(id >= 0 && m.vals[id].defined() ? &m.vals[id] : nullptr);
      need[i] = id >= 0 && m.requires_grad[id] && st.layer->differentiable_input(static_cast<int>(i));
    }
    for (int id : st.out) out.push_back(m.vals[id].defined() ? &m.vals[id] : nullptr);
    std::vector<Tensor> gin(st.in.size());
    with_context("while computing gradients of " + st.desc, [&] {
      st.layer->backward(in, out, grads[st.out[0]], gin, need);
      return 0;
    });
    for (int id : st.out) grads[id] = Tensor{};
    for (size_t i = 0; i < st.in.size(); ++i)
      if (need[i] && gin[i].defined()) grads[st.in[i]] = accumulate(grads[st.in[i]], gin[i]);
    // Parameters whose gradient no earlier step adds to: final now.
    for (size_t k = 0; k < m.param_ids.size(); ++k)
      if (m.param_first_step[k] == static_cast<int>(s)) {
        m.add_param_grad(k, grads[m.param_ids[k]]);
        grads[m.param_ids[k]] = Tensor{};
        announced[k] = true;
        if (m.gradient_ready) m.gradient_ready(k);
      }
    // Release saved activations that no earlier step's backward needs.
    auto release = [&](int id) {
      if (id >= 0 && m.first_keep[id] >= static_cast<int>(s) && !m.pinned[id] && !m.constants[id].defined()) m.vals[id] = Value{};
    };
    for (int id : st.in) release(id);
    for (int id : st.out) release(id);
  }
  for (size_t k = 0; k < m.param_ids.size(); ++k)
    if (!announced[k]) {  // no step added to it (its step was skipped: no gradient reached it)
      m.add_param_grad(k, grads[m.param_ids[k]]);
      if (m.gradient_ready) m.gradient_ready(k);
    }
  m.in_grads.clear();
  if (m.options.input_grads)
    for (size_t k = 0; k < m.input_ids.size(); ++k) {
      const int id = m.input_ids[k];
      m.in_grads.push_back(grads[id].defined() ? to_layout(grads[id], Layout::plain) : Tensor::zeros(m.input_shapes[k]));
    }
  m.vals.clear();
  m.trained_forward = false;
}

void Model::set_gradient_ready_hook(std::function<void(size_t)> hook) { impl_->gradient_ready = std::move(hook); }

const std::vector<BatchNormLayer>& Model::batchnorm_layers() const { return impl_->bn_layers; }

void Model::set_batchnorm_statistics(BatchNormStatistics treatment) {
  impl_->bn_treatment = treatment;
  impl_->bn_deferred.clear();
  impl_->bn_collected.clear();
}

std::vector<std::vector<ChannelMoments>> Model::take_batch_moments() { return std::exchange(impl_->bn_deferred, {}); }

std::vector<ChannelMoments> Model::take_collected_moments() {
  std::vector<ChannelMoments> out = std::exchange(impl_->bn_collected, {});
  out.resize(impl_->bn_layers.size());
  return out;
}

void Model::update_running_statistics(size_t layer, const ChannelMoments& batch) {
  impl_->running_update(layer, batch.mean, batch.variance(), true);
}

void Model::set_running_statistics(size_t layer, const ChannelMoments& population) {
  impl_->running_update(layer, population.mean, population.variance(), false);
}

void Model::export_weights(onnx::ModelProto& model) const {
  std::unordered_map<std::string, const Tensor*> values;
  for (const auto& p : impl_->params) values[p.name] = &p.value;
  for (const auto& b : impl_->buffers) values[b.name] = &b.value;
  for (auto& t : *model.mutable_graph()->mutable_initializer()) {
    auto it = values.find(t.name());
    if (it == values.end()) continue;
    onnx::TensorProto p = tensor_to_proto(*it->second, t.name());
    t.clear_float_data();
    t.clear_double_data();
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    t.set_data_type(onnx::TensorProto::FLOAT);
    t.set_raw_data(p.raw_data());
  }
}

void Model::release_exported_weights(onnx::ModelProto& model) const {
  std::unordered_set<std::string> held;
  for (const auto& p : impl_->params) held.insert(p.name);
  for (const auto& b : impl_->buffers) held.insert(b.name);
  for (auto& t : *model.mutable_graph()->mutable_initializer()) {
    if (!held.count(t.name())) continue;
    // Swapped with empty ones: clear_raw_data() and the fields' Clear() keep their capacity.
    std::string().swap(*t.mutable_raw_data());
    google::protobuf::RepeatedField<float>().Swap(t.mutable_float_data());
    google::protobuf::RepeatedField<double>().Swap(t.mutable_double_data());
    t.clear_external_data();
    t.clear_data_location();
  }
}

void Model::set_seed(uint64_t seed) { impl_->rng.seed(seed); }

std::string Model::summary() const {
  std::ostringstream os;
  os << impl_->steps.size() << " nodes (" << impl_->folded << " folded):";
  for (const auto& [op, n] : impl_->op_counts) os << ' ' << op << " x" << n;
  int64_t trainable = 0, statistics = 0;
  for (const auto& p : impl_->params) trainable += p.value.numel();
  for (const auto& b : impl_->buffers) statistics += b.value.numel();
  os << "; " << trainable << " trainable parameters in " << impl_->params.size() << " tensors, " << statistics << " in "
     << impl_->buffers.size() << " running-statistics buffers";
  return os.str();
}

}  // namespace hpcnn::nn
