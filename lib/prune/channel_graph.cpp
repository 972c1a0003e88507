#include "prune/channel_graph.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "onnx/model.h"
#include "onnx/op_facts.h"

namespace hpcnn::prune {
namespace {

using onnxu::ConstantRef;
using onnxu::Dims;
using Label = std::vector<int>;

// Operator facts (onnx/op_facts.h) decide which rule follows the channels through a node: its
// Channels, the roles of its inputs (weights and their axes, biases, per-channel parameters,
// shape-like constants by kind). Shape-like inputs of pass-through operators (Resize sizes /
// scales / roi, Upsample scales, Expand shape, Tile repeats) are followed only when constant,
// and only as below; otherwise the channels are fixed. Reshape (the flatten rule) and
// Squeeze/Unsqueeze (axes rule) read theirs in their own rules; every other operator with a
// shape-like input (Pad, Slice, ConstantOfShape fed by Shape, ...) is not followed at all:
//  - sizes:     the channel entry must equal the channel count; it is rewritten to the kept count;
//  - broadcast: the channel entry is 1 (kept) or the channel count (rewritten);
//  - factor:    the channel entry must be 1;
//  - roi:       read only by tf_crop_and_resize: the channel axis must span [0, 1].
using onnxu::Role;
using onnxu::ShapeKind;

bool followed_shape(ShapeKind k) {
  return k == ShapeKind::sizes || k == ShapeKind::broadcast || k == ShapeKind::factor || k == ShapeKind::roi;
}

// A shape-like constant of a signature: input position (-1: attribute `name`), name, kind.
struct ShapeInput {
  int input;
  const char* name;
  ShapeKind kind;
};

// The followed shape-like inputs of `sig`, inputs in position order, then attributes.
std::vector<ShapeInput> shape_inputs(const onnxu::Signature& sig) {
  std::vector<ShapeInput> out;
  for (size_t i = 0; i < sig.inputs.size(); ++i)
    if (sig.inputs[i].role == Role::shape && followed_shape(sig.inputs[i].shape))
      out.push_back({static_cast<int>(i), sig.inputs[i].name, sig.inputs[i].shape});
  for (const auto& a : sig.attributes)
    if (a.role == Role::shape && followed_shape(a.shape)) out.push_back({-1, a.name, a.shape});
  return out;
}

struct Analyzer {
  const onnx::ModelProto& model;
  const onnxu::GraphView& view;
  const onnxu::ShapeMap& shapes;
  int64_t opset;  // of the default domain
  ChannelGraph cg;
  std::unordered_map<std::string, Label> labels;

  const Dims* shape(const std::string& v) const {
    auto it = shapes.find(v);
    return it == shapes.end() ? nullptr : &it->second;
  }
  const Label* label(const std::string& v) const {
    auto it = labels.find(v);
    return it == labels.end() ? nullptr : &it->second;
  }
  void fix(const Label& l, const std::string& reason) {
    for (int id : l) cg.fix(id, reason);
  }
  Label fixed_ids(int64_t n, const std::string& reason) {
    Label l = cg.new_ids(n);
    fix(l, reason);
    return l;
  }

  // A constant sliced on behalf of channels: it must have a single consumer, else the slice
  // would change another node too.
  void add_slice(const std::string& value, int axis, const Label& ids, const std::string& who) {
    if (view.consumers(value).size() > 1) {
      fix(ids, "constant '" + value + "' of " + who + " is shared by several nodes");
      return;
    }
    cg.slices.push_back({value, axis, ids});
  }

  // Slices an elementwise constant operand if it broadcasts along axis 1 of an output of rank
  // `rank`; fixes the channels if it has another extent there.
  void constant_operand(const ConstantRef& c, int rank, const Label& ids, const std::string& who) {
    const int r = static_cast<int>(c.dims.size());
    const int axis = 1 - (rank - r);
    if (axis < 0 || rank < 2 || c.dims[axis] == 1) return;
    if (c.dims[axis] == static_cast<int64_t>(ids.size())) {
      add_slice(c.name, axis, ids, who);
      return;
    }
    fix(ids, who + " broadcasts constant '" + c.name + "' of shape " + onnxu::dims_to_string(c.dims) + " against " +
                 std::to_string(ids.size()) + " channels");
  }

  // A constant seen through the node that gives it unit axes: Unsqueeze(c, axes), or Reshape(c,
  // shape) whose extents other than 1 are c's in order (e.g. Unsqueeze(scale [C], axes [1, 2]) ->
  // [C, 1, 1], as some Caffe2 exports write a per-channel scale layer after BatchNormalization).
  struct ViewedConstant {
    ConstantRef source;
    std::vector<int> source_axis;  // per axis of the value: the source's axis (-1: a unit axis)
    int node = -1;                 // the Unsqueeze / Reshape
  };
  std::optional<ViewedConstant> unit_axis_view(const std::string& value) {
    const int p = view.producer(value);
    if (p < 0) return std::nullopt;
    const auto& nd = view.node(p);
    if ((nd.op_type() != "Unsqueeze" && nd.op_type() != "Reshape") || nd.input_size() < 1) return std::nullopt;
    auto src = onnxu::find_constant(view, nd.input(0));
    const Dims* out = shape(value);
    if (!src || !out) return std::nullopt;
    ViewedConstant vc{*src, std::vector<int>(out->size(), -1), p};
    size_t j = 0;
    auto skip_units = [&] {
      while (j < src->dims.size() && src->dims[j] == 1) ++j;
    };
    for (size_t i = 0; i < out->size(); ++i) {
      if ((*out)[i] < 0) return std::nullopt;
      if ((*out)[i] == 1) continue;
      skip_units();
      if (j >= src->dims.size() || src->dims[j] != (*out)[i]) return std::nullopt;
      vc.source_axis[i] = static_cast<int>(j++);
    }
    skip_units();
    if (j != src->dims.size()) return std::nullopt;
    return vc;
  }

  // Slices the source of an elementwise operand computed from a constant (unit_axis_view) where
  // it spans the channels; fixes the channels where it cannot.
  void viewed_operand(const ViewedConstant& vc, const std::string& value, int rank, const Label& ids, const std::string& who) {
    const Dims& d = *shape(value);
    const int axis = 1 - (rank - static_cast<int>(d.size()));
    if (axis < 0 || rank < 2 || d[axis] == 1) return;
    const std::string what = "'" + value + "' (" + view.describe(vc.node) + " of constant '" + vc.source.name + "')";
    if (d[axis] != static_cast<int64_t>(ids.size())) {
      fix(ids, who + " broadcasts " + what + " of shape " + onnxu::dims_to_string(d) + " against " + std::to_string(ids.size()) +
                   " channels");
      return;
    }
    if (view.consumers(value).size() > 1) {
      fix(ids, what + ", an operand of " + who + ", is shared by several nodes");
      return;
    }
    const auto& nd = view.node(vc.node);
    if (nd.op_type() == "Reshape") {  // a target that names the channel count is rewritten too
      auto t = nd.input_size() > 1 ? onnxu::constant_int64s(view, nd.input(1)) : std::nullopt;
      if (!t || t->size() != d.size() || (*t)[axis] == 0) {
        fix(ids, who + " reads " + what + ", whose shape input is not a constant naming the channel axis");
        return;
      }
      if ((*t)[axis] > 0) cg.shape_inputs.push_back({vc.node, 1, axis, ids});
    }
    add_slice(vc.source.name, vc.source_axis[axis], ids, who);
  }

  // A channel shuffle (ShuffleNet, Zhang et al., CVPR 2018) starting at Reshape node n, whose input
  // carries channels x: Reshape [N, C, H, W] -> [N, g, C/g, H, W], Transpose perm [0, 2, 1, 3, 4],
  // Reshape -> [N, C, H, W]. Output channel j*g + i is input channel i*(C/g) + j. Channel j of
  // every group is united with channel j of the others (they are removed together), so that the
  // pruned tensor is still g equal groups and the shuffle stays a shuffle; the targets' channel
  // entries are rewritten. Returns false (nothing recorded) when the nodes are not this pattern.
  bool channel_shuffle(int n, const Label& x) {
    const auto& nd = view.node(n);
    const Dims* si = shape(nd.input(0));
    const Dims* so = shape(nd.output(0));
    if (!si || !so || si->size() != 4 || so->size() != 5) return false;
    const int64_t C = static_cast<int64_t>(x.size()), g = (*so)[1], m = (*so)[2];
    if (g < 1 || m < 1 || g * m != C || (*so)[3] != (*si)[2] || (*so)[4] != (*si)[3]) return false;
    auto t1 = nd.input_size() > 1 ? onnxu::constant_int64s(view, nd.input(1)) : std::nullopt;
    const auto& after_reshape = view.consumers(nd.output(0));
    if (!t1 || t1->size() != 5 || (*t1)[2] == 0 || after_reshape.size() != 1 || after_reshape[0].input != 0) return false;
    const auto& tr = view.node(after_reshape[0].node);
    if (tr.op_type() != "Transpose" || onnxu::attr_ints(tr, "perm") != std::vector<int64_t>{0, 2, 1, 3, 4}) return false;
    const auto& after_transpose = view.consumers(tr.output(0));
    if (after_transpose.size() != 1 || after_transpose[0].input != 0) return false;
    const int n2 = after_transpose[0].node;
    const auto& nd2 = view.node(n2);
    const Dims* s2 = shape(nd2.output(0));
    if (nd2.op_type() != "Reshape" || nd2.input_size() < 2 || !s2 || s2->size() != 4 ||
        !std::equal(s2->begin() + 1, s2->end(), si->begin() + 1))
      return false;
    auto t2 = onnxu::constant_int64s(view, nd2.input(1));
    if (!t2 || t2->size() != 4 || (*t2)[1] == 0) return false;
    for (int64_t j = 0; j < m; ++j)
      for (int64_t i = 1; i < g; ++i) cg.unite(x[j], x[i * m + j]);
    Label out(x.size());
    for (int64_t i = 0; i < g; ++i)
      for (int64_t j = 0; j < m; ++j) out[j * g + i] = x[i * m + j];
    if ((*t1)[2] > 0) cg.shape_inputs.push_back({n, 1, 2, Label(x.begin(), x.begin() + m)});
    if ((*t2)[1] > 0) cg.shape_inputs.push_back({n2, 1, 1, out});
    labels[nd2.output(0)] = std::move(out);
    return true;
  }

  Layer make_layer(int n, const std::string& op, const ConstantRef& w, int axis) {
    const auto& nd = view.node(n);
    Layer L;
    L.node = n;
    L.name = nd.name().empty() ? nd.output(0) : nd.name();
    L.op = op;
    L.weight = w;
    L.weight_axis = axis;
    L.channels = w.dims[axis];
    L.weight_numel = onnxu::numel(w.dims);
    L.ids = cg.new_ids(L.channels);
    L.l1 = constant_l1_norms(view, w, axis);
    return L;
  }

  // Checks the followed shape-like inputs (see above) of node n, whose input 0 carries channels `x`,
  // and records the rewrites they need; or fixes the channels, with the reason, and returns false.
  bool follow_shape_inputs(int n, const onnxu::OpFacts& facts, const Label& x) {
    const auto& nd = view.node(n);
    if (!facts.has_shape_inputs()) return true;
    const std::string who = view.describe(n);
    const onnxu::Signature* sig = facts.at(opset);
    if (!sig) {
      fix(x, who + " is older than the opsets whose shape-like inputs the analysis knows");
      return false;
    }
    const Dims* xs = shape(nd.input(0));
    const int64_t rank = xs ? static_cast<int64_t>(xs->size()) : -1;
    const int64_t c = static_cast<int64_t>(x.size());
    // Resize (opset 18) may list the axes its sizes/scales/roi entries refer to.
    const std::vector<int64_t> axes = onnxu::attr_ints(nd, "axes");
    if (!axes.empty() && rank < 0) {
      fix(x, who + " lists `axes` for an input of unknown rank");
      return false;
    }
    std::vector<ShapeAction> rewrites;
    for (const ShapeInput& si : shape_inputs(*sig)) {
      const std::string what = "'" + std::string(si.name) + "'";
      std::optional<std::vector<double>> v;
      if (si.input < 0) {
        const auto* a = onnxu::find_attribute(nd, si.name);
        if (a) v = std::vector<double>(a->floats().begin(), a->floats().end());
      } else if (si.input < nd.input_size() && !nd.input(si.input).empty()) {
        v = onnxu::constant_doubles(view, nd.input(si.input));
        if (!v) {
          fix(x, who + " has a shape-like input " + what + " that is not constant");
          return false;
        }
      }
      if (!v || v->empty()) continue;  // absent (Resize: scales or sizes)
      if (si.kind == ShapeKind::roi &&
          onnxu::attr_string(nd, "coordinate_transformation_mode", "half_pixel") != "tf_crop_and_resize")
        continue;
      const int64_t entries = static_cast<int64_t>(si.kind == ShapeKind::roi ? v->size() / 2 : v->size());
      int64_t entry = 1;  // the channel axis' entry; -1: the input leaves that axis alone
      if (!axes.empty()) {
        entry = -1;
        for (size_t i = 0; i < axes.size(); ++i)
          if (axes[i] == 1 || axes[i] + rank == 1) entry = static_cast<int64_t>(i);
      } else if (si.kind == ShapeKind::broadcast) {
        if (rank < 0 || entries > rank) {
          fix(x, who + " broadcasts to " + what + " with " + std::to_string(entries) + " entries, for an input of " +
                     (rank < 0 ? std::string("unknown rank") : "rank " + std::to_string(rank)));
          return false;
        }
        entry = 1 - (rank - entries);
      }
      if (entry < 0) continue;
      if (entry >= entries) {
        fix(x, who + " has " + what + " with " + std::to_string(entries) + " entries, too few for the channel axis");
        return false;
      }
      const double e = (*v)[entry];
      switch (si.kind) {
        case ShapeKind::sizes:
          if (e != static_cast<double>(c)) {
            fix(x, who + " resizes " + std::to_string(c) + " channels to " + std::to_string(static_cast<int64_t>(e)));
            return false;
          }
          rewrites.push_back({n, si.input, static_cast<int>(entry), x});
          break;
        case ShapeKind::broadcast:
          if (e != 1 && e != static_cast<double>(c)) {
            fix(x, who + " broadcasts " + std::to_string(c) + " channels to " + std::to_string(static_cast<int64_t>(e)));
            return false;
          }
          if (e != 1) rewrites.push_back({n, si.input, static_cast<int>(entry), x});
          break;
        case ShapeKind::factor:
          if (e != 1) {
            std::ostringstream by;
            by << e;
            fix(x, who + " scales the channel axis by " + by.str() + " (" + what + ")");
            return false;
          }
          break;
        case ShapeKind::roi:
          if ((*v)[entry] != 0 || (*v)[entries + entry] != 1) {
            fix(x, who + " crops the channel axis (" + what + ")");
            return false;
          }
          break;
        default:
          break;
      }
    }
    cg.shape_inputs.insert(cg.shape_inputs.end(), rewrites.begin(), rewrites.end());
    return true;
  }

  // The node a channel rule looks at (visit()).
  struct RuleSite {
    int n;
    const onnx::NodeProto& nd;
    std::string who;  // "node 'conv1' (Conv)"
    const onnxu::OpFacts* facts;
    const onnxu::Signature* sig;  // at the model's opset; null when the opset has none
    const Label* x0;              // the channels input 0 carries, or null
    std::string out0;
    std::string in(int k) const { return k >= 0 && k < nd.input_size() ? nd.input(k) : std::string(); }
  };

  // Returns the input positions the rule consumed; labelled inputs not in the set are fixed.
  std::set<int> visit(int n) {
    const auto& nd = view.node(n);
    const onnxu::OpFacts* facts = onnxu::find_op_facts(nd);  // null: unknown, or another domain
    if (!facts) return {};
    RuleSite site{n, nd, view.describe(n), facts, facts->at(opset), nullptr, nd.output_size() ? nd.output(0) : std::string()};
    site.x0 = label(site.in(0));
    switch (facts->channels) {
      case onnxu::Channels::conv:
        return conv_rule(site);
      case onnxu::Channels::dense:
        return dense_rule(site);
      case onnxu::Channels::pass_through:
        return pass_through_rule(site);
      case onnxu::Channels::squeeze:
        return squeeze_rule(site);
      case onnxu::Channels::elementwise:
        return elementwise_rule(site);
      case onnxu::Channels::concat:
        return concat_rule(site);
      case onnxu::Channels::flatten:
        return flatten_rule(site);
      case onnxu::Channels::reads_shape:
        return reads_shape_rule(site);
      case onnxu::Channels::unfollowable:
        break;
    }
    return {};  // unfollowable
  }

  // Conv: each output channel is a filter (weight axis 0); groups and depthwise convolutions tie channels.
  std::set<int> conv_rule(const RuleSite& site) {
    const int n = site.n;
    const onnx::NodeProto& nd = site.nd;
    const std::string& op = site.nd.op_type();
    const std::string& who = site.who;
    const onnxu::Signature* sig = site.sig;
    const Label* x0 = site.x0;
    const std::string& out0 = site.out0;
    auto in = [&site](int k) { return site.in(k); };
    if (!sig) return {};
    const int wi = sig->find(Role::weight), bi = sig->find(Role::bias);
    const int out_axis = sig->inputs[wi].axis, in_axis = sig->inputs[wi].in_axis;  // 0 and 1
    auto w = onnxu::find_constant(view, in(wi));
    if (!w || w->dims.size() < 3 || !onnxu::is_floating(w->dtype)) return {};
    const int64_t g = onnxu::attr_int(nd, "group", 1);
    const int64_t cout = w->dims[out_axis], cin_g = w->dims[in_axis];
    const Label* x = x0;
    if (g < 1 || cout % g != 0) {
      if (x) fix(*x, who + " has " + std::to_string(cout) + " filters, not a multiple of its " + std::to_string(g) + " groups");
      labels[out0] = fixed_ids(cout, who + " has an invalid group count");
      return {0};
    }
    const int64_t cout_g = cout / g;
    Layer L = make_layer(n, op, *w, out_axis);
    if (g > 1 && cin_g == 1) {
      // Depthwise (channel multiplier cout_g): input channel c feeds filters c*cout_g ...
      // (c+1)*cout_g-1; removing c removes that whole group, and `group` shrinks with it.
      if (x && static_cast<int64_t>(x->size()) == g) {
        for (int64_t c = 0; c < g; ++c)
          for (int64_t t = 0; t < cout_g; ++t) cg.unite(L.ids[c * cout_g + t], (*x)[c]);
        cg.group_attrs.push_back({n, *x});
      } else {
        fix(L.ids, "depthwise " + who + " reads channels that cannot be pruned");
      }
    } else if (g > 1) {
      // Grouped: every group must keep the same number of input channels and of filters, so
      // position j of each group is tied across the groups; `group` stays.
      for (int64_t grp = 1; grp < g; ++grp)
        for (int64_t j = 0; j < cout_g; ++j) cg.unite(L.ids[grp * cout_g + j], L.ids[j]);
      if (x && static_cast<int64_t>(x->size()) == cin_g * g) {
        for (int64_t grp = 1; grp < g; ++grp)
          for (int64_t j = 0; j < cin_g; ++j) cg.unite((*x)[grp * cin_g + j], (*x)[j]);
        add_slice(w->name, in_axis, Label(x->begin(), x->begin() + cin_g), who);
      } else if (x) {
        fix(*x, who + " has " + std::to_string(cin_g * g) + " input channels, its input carries " + std::to_string(x->size()));
      }
    } else if (x) {
      if (static_cast<int64_t>(x->size()) != cin_g)
        fix(*x, who + " weight has " + std::to_string(cin_g) + " input channels, its input carries " + std::to_string(x->size()));
      else
        add_slice(w->name, in_axis, *x, who);
    }
    add_slice(w->name, out_axis, L.ids, who);
    if (!in(bi).empty()) {
      auto b = onnxu::find_constant(view, in(bi));
      if (b && b->dims.size() == 1 && b->dims[0] == cout)
        add_slice(b->name, 0, L.ids, who);
      else
        fix(L.ids, who + " has a bias that is not a constant of shape [" + std::to_string(cout) + "]");
    }
    labels[out0] = L.ids;
    cg.layers.push_back(std::move(L));
    return {0};
  }

  // Gemm, MatMul with a constant weight: each output feature is a neuron; the input's features slice the weight.
  std::set<int> dense_rule(const RuleSite& site) {
    const int n = site.n;
    const onnx::NodeProto& nd = site.nd;
    const std::string& op = site.nd.op_type();
    const std::string& who = site.who;
    const onnxu::Signature* sig = site.sig;
    const Label* x0 = site.x0;
    const std::string& out0 = site.out0;
    auto in = [&site](int k) { return site.in(k); };
    if (!sig) return {};
    const int wi = sig->find(Role::weight), bi = sig->find(Role::bias);
    const onnxu::InputFact& af = sig->inputs[0];
    const onnxu::InputFact& wf = sig->inputs[wi];
    auto w = onnxu::find_constant(view, in(wi));
    if (!w || w->dims.size() != 2 || !onnxu::is_floating(w->dtype)) return {};
    auto axis2 = [&](int axis) {
      axis = onnxu::node_axis(nd, wf, axis);
      return axis < 0 ? axis + 2 : axis;
    };
    const int n_axis = axis2(wf.axis), k_axis = axis2(wf.in_axis);
    const bool trans_a = af.transposed_by && onnxu::attr_int(nd, af.transposed_by, 0) != 0;
    const Label* a = x0;
    const Dims* a_shape = shape(in(0));
    if (a) {
      if (trans_a)
        fix(*a, "feeds " + who + " with " + af.transposed_by + "=1");
      else if (static_cast<int64_t>(a->size()) != w->dims[k_axis])
        fix(*a, who + " weight has " + std::to_string(w->dims[k_axis]) + " input features, its input carries " +
                    std::to_string(a->size()));
      else
        add_slice(w->name, k_axis, *a, who);
    }
    Layer L = make_layer(n, op, *w, n_axis);
    // Features on A's last axis (MatMul) are the channel axis 1 only for a 2-D A.
    if (af.axis < 0 && (!a_shape || static_cast<int>(a_shape->size()) + af.axis != 1))
      fix(L.ids, who + " multiplies an input that is not known to be 2-D");
    add_slice(w->name, n_axis, L.ids, who);
    if (bi >= 0 && !in(bi).empty()) {
      auto c = onnxu::find_constant(view, in(bi));
      if (!c)
        fix(L.ids, who + " has a bias C that is not constant");
      else if (!c->dims.empty() && c->dims.back() == L.channels)
        add_slice(c->name, static_cast<int>(c->dims.size()) - 1, L.ids, who);
      else if (!c->dims.empty() && c->dims.back() != 1)
        fix(L.ids, who + " has a bias C of shape " + onnxu::dims_to_string(c->dims));
    }
    labels[out0] = L.ids;
    cg.layers.push_back(std::move(L));
    return {0};
  }

  // Output 0 carries input 0's channels; per-channel parameters and running statistics are sliced with them.
  std::set<int> pass_through_rule(const RuleSite& site) {
    const int n = site.n;
    const std::string& who = site.who;
    const onnxu::OpFacts* facts = site.facts;
    const onnxu::Signature* sig = site.sig;
    const Label* x0 = site.x0;
    const std::string& out0 = site.out0;
    auto in = [&site](int k) { return site.in(k); };
    if (!x0) return {0};
    // Per-channel parameters and running statistics (BatchNormalization, InstanceNormalization).
    for (int k = 0; sig && k < static_cast<int>(sig->inputs.size()); ++k) {
      const Role r = sig->inputs[k].role;
      if (r != Role::per_channel && r != Role::running_stat) continue;
      auto c = onnxu::find_constant(view, in(k));
      if (c && c->dims.size() == 1 && c->dims[0] == static_cast<int64_t>(x0->size()))
        add_slice(c->name, 0, *x0, who);
      else
        fix(*x0, who + " has a parameter '" + in(k) + "' that is not a constant of shape [C]");
    }
    if (follow_shape_inputs(n, *facts, *x0)) labels[out0] = *x0;
    return {0};
  }

  // Squeeze/Unsqueeze: followed when the axes leave axes 0 and 1 alone.
  std::set<int> squeeze_rule(const RuleSite& site) {
    const onnx::NodeProto& nd = site.nd;
    const onnxu::Signature* sig = site.sig;
    const Label* x0 = site.x0;
    const std::string& out0 = site.out0;
    auto in = [&site](int k) { return site.in(k); };
    if (!x0 || !sig) return {};
    std::vector<int64_t> axes = onnxu::attr_ints(nd, "axes");
    if (!in(1).empty()) {
      auto c = onnxu::constant_int64s(view, in(1));
      if (!c) return {};
      axes = *c;
    }
    // Axes of the output (Unsqueeze) or of the input (Squeeze).
    bool of_output = false;
    for (const auto& f : sig->inputs) of_output = of_output || f.shape == ShapeKind::output_axes;
    for (const auto& f : sig->attributes) of_output = of_output || f.shape == ShapeKind::output_axes;
    const Dims* s = shape(of_output ? out0 : in(0));
    if (axes.empty() || !s) return {};
    for (int64_t ax : axes) {
      if (ax < 0) ax += static_cast<int64_t>(s->size());
      if (ax <= 1) return {};
    }
    labels[out0] = *x0;
    return {0};
  }

  // Broadcasting operators: carried channels are united; constant and viewed operands sliced.
  std::set<int> elementwise_rule(const RuleSite& site) {
    const onnx::NodeProto& nd = site.nd;
    const std::string& who = site.who;
    const std::string& out0 = site.out0;
    auto in = [&site](int k) { return site.in(k); };
    std::vector<int> carried;
    for (int k = 0; k < nd.input_size(); ++k)
      if (!in(k).empty() && label(in(k))) carried.push_back(k);
    if (carried.empty()) return {};
    const Label first = *label(in(carried[0]));
    const Dims* out_shape = shape(out0);
    const int rank = out_shape ? static_cast<int>(out_shape->size()) : -1;
    std::set<int> handled;
    for (int k = 0; k < nd.input_size(); ++k) {
      if (in(k).empty()) continue;
      if (const Label* l = label(in(k))) {
        if (l->size() != first.size()) {
          fix(*l, who + " combines " + std::to_string(l->size()) + " and " + std::to_string(first.size()) + " channels");
          fix(first, who + " combines " + std::to_string(l->size()) + " and " + std::to_string(first.size()) + " channels");
        } else {
          for (size_t c = 0; c < first.size(); ++c) cg.unite(first[c], (*l)[c]);
        }
        handled.insert(k);
      } else if (auto c = onnxu::find_constant(view, in(k))) {
        if (rank < 0)
          fix(first, who + " has an output of unknown rank");
        else
          constant_operand(*c, rank, first, who);
      } else if (auto vc = rank >= 0 ? unit_axis_view(in(k)) : std::nullopt) {
        viewed_operand(*vc, in(k), rank, first, who);
      } else {
        const Dims* s = shape(in(k));
        if (!s || rank < 0) {
          fix(first, who + " combines the channels with '" + in(k) + "' of unknown shape");
        } else {
          const int axis = 1 - (rank - static_cast<int>(s->size()));
          if (axis >= 0 && (*s)[axis] != 1)
            fix(first, who + " combines the channels with '" + in(k) + "', which cannot be pruned");
        }
      }
    }
    labels[out0] = first;
    return handled;
  }

  // Concatenation along axis 1: the inputs' channels one after the other.
  std::set<int> concat_rule(const RuleSite& site) {
    const onnx::NodeProto& nd = site.nd;
    const std::string& who = site.who;
    const std::string& out0 = site.out0;
    auto in = [&site](int k) { return site.in(k); };
    const Dims* s = shape(out0);
    int64_t axis = onnxu::attr_int(nd, "axis", 1);
    if (axis < 0 && s) axis += static_cast<int64_t>(s->size());
    if (axis != 1) return {};
    Label out;
    std::set<int> handled;
    for (int k = 0; k < nd.input_size(); ++k) {
      if (const Label* l = label(in(k))) {
        out.insert(out.end(), l->begin(), l->end());
        handled.insert(k);
      } else {
        const Dims* si = shape(in(k));
        if (!si || si->size() < 2 || (*si)[1] < 0) {
          for (int j : handled) fix(*label(in(j)), who + " concatenates them with '" + in(k) + "' of unknown channel count");
          return handled;
        }
        Label f = fixed_ids((*si)[1], who + " concatenates them with '" + in(k) + "', which cannot be pruned");
        out.insert(out.end(), f.begin(), f.end());
      }
    }
    labels[out0] = out;
    return handled;
  }

  // Flatten (axis 1) and Reshape to [N, C*H*W]: each channel becomes H*W features (D*H*W of an NCDHW
  // map: the product of every axis after the channels), or a channel shuffle.
  std::set<int> flatten_rule(const RuleSite& site) {
    const int n = site.n;
    const onnx::NodeProto& nd = site.nd;
    const std::string& who = site.who;
    const onnxu::Signature* sig = site.sig;
    const Label* x0 = site.x0;
    const std::string& out0 = site.out0;
    auto in = [&site](int k) { return site.in(k); };
    if (!x0) return {};
    // Reshape's target input; none: Flatten, at its `axis` attribute.
    const int target = sig ? sig->find(Role::shape) : -1;
    const Dims* si = shape(in(0));
    const Dims* so = shape(out0);
    if (!si || si->size() < 2 || std::any_of(si->begin() + 1, si->end(), [](int64_t d) { return d < 0; })) {
      fix(*x0, who + ": the input's channel and spatial sizes are unknown");
      return {0};
    }
    int64_t spatial = 1;
    for (size_t i = 2; i < si->size(); ++i) spatial *= (*si)[i];
    if (target < 0 && onnxu::attr_int(nd, "axis", 1) != 1) return {};
    if (target >= 0 && so && so->size() == 5 && channel_shuffle(n, *x0)) return {0, 1};
    if (target >= 0) {
      const bool flat = so && so->size() == 2 && (*so)[1] == static_cast<int64_t>(x0->size()) * spatial;
      auto t = onnxu::constant_int64s(view, in(target));
      if (!flat) {
        fix(*x0, who + " is not a flatten to [N, C*H*W]");
        return {0};
      }
      if (!t || t->size() != 2) {
        fix(*x0, who + " has a shape input that is not constant");
        return {0};
      }
    }
    // The features after the flatten: C * H * W entries (bounded, against corrupt shapes).
    constexpr int64_t kMaxFeatures = int64_t{1} << 28;
    if (spatial <= 0 || static_cast<int64_t>(x0->size()) > kMaxFeatures / spatial) {
      fix(*x0, who + " flattens " + std::to_string(x0->size()) + " channels of spatial size " + std::to_string(spatial) +
                   ", too many features to follow");
      return {0};
    }
    Label out;
    out.reserve(x0->size() * static_cast<size_t>(spatial));
    for (int id : *x0)
      for (int64_t s = 0; s < spatial; ++s) out.push_back(id);
    if (target >= 0 && (*onnxu::constant_int64s(view, in(target)))[1] > 0) cg.shape_inputs.push_back({n, target, 1, out});
    labels[out0] = std::move(out);
    return {0, 1};
  }

  // Shape and the like: values computed from the count would change with the pruning unseen.
  std::set<int> reads_shape_rule(const RuleSite& site) {
    const std::string& who = site.who;
    const Label* x0 = site.x0;
    if (!x0) return {};
    // Values computed from the count (Reshape targets, Resize sizes, ConstantOfShape, ...)
    // would change with the pruning where the analysis cannot see them.
    fix(*x0, who + " reads their count");
    return {0};
  }

  void run() {
    for (int n : view.topo_order()) {
      const auto& nd = view.node(n);
      std::set<int> handled = with_context("while analysing channels at " + view.describe(n), [&] { return visit(n); });
      for (int k = 0; k < nd.input_size(); ++k) {
        const Label* l = nd.input(k).empty() ? nullptr : label(nd.input(k));
        if (l && !handled.count(k))
          fix(*l, "they flow into input " + std::to_string(k) + " of " + view.describe(n) + ", which cannot be followed");
      }
      for (const auto& v : view.subgraph_reads(n))
        if (const Label* l = label(v))
          fix(*l, "they are read inside a subgraph of " + view.describe(n) + " ('" + v +
                      "'), which cannot be followed unless the subgraph is sliced too");
    }
    for (const auto& o : view.graph().output())
      if (const Label* l = label(o.name())) fix(*l, "their channels reach graph output '" + o.name() + "'");
    cg.finalize_fixed();
    build_groups();
  }

  void build_groups() {
    // Layers sharing a class form a group: union-find over layers keyed by class roots.
    const int nl = static_cast<int>(cg.layers.size());
    std::vector<int> lp(nl);
    for (int i = 0; i < nl; ++i) lp[i] = i;
    auto find = [&](int i) {
      while (lp[i] != i) i = lp[i] = lp[lp[i]];
      return i;
    };
    std::unordered_map<int, int> owner;  // class root -> first layer
    for (int i = 0; i < nl; ++i)
      for (int id : cg.layers[i].ids) {
        auto [it, fresh] = owner.emplace(cg.root(id), i);
        if (!fresh) lp[find(i)] = find(it->second);
      }
    std::unordered_map<int, int> group_of_root;
    for (int i = 0; i < nl; ++i) {
      auto [it, fresh] = group_of_root.emplace(find(i), static_cast<int>(cg.groups.size()));
      if (fresh) cg.groups.emplace_back();
      cg.layers[i].group = it->second;
      cg.groups[it->second].layers.push_back(i);
    }
    for (auto& g : cg.groups) {
      std::unordered_map<int, size_t> class_index;
      for (int li : g.layers) {
        const Layer& L = cg.layers[li];
        g.weight_numel += L.weight_numel;
        for (int64_t c = 0; c < L.channels; ++c) {
          const int r = cg.root(L.ids[c]);
          auto [it, fresh] = class_index.emplace(r, g.classes.size());
          if (fresh) {
            g.classes.push_back(r);
            g.score.push_back(0);
            if (g.fixed_reason.empty()) g.fixed_reason = cg.fixed_reason_of_root(r);
          }
          g.score[it->second] += L.l1[c];
        }
      }
    }
  }
};

}  // namespace

int ChannelGraph::root(int id) const {
  while (parent_[id] != id) id = parent_[id] = parent_[parent_[id]];
  return id;
}

std::vector<int> ChannelGraph::new_ids(int64_t n) {
  std::vector<int> ids(static_cast<size_t>(n));
  for (auto& id : ids) {
    id = static_cast<int>(parent_.size());
    parent_.push_back(id);
    fixed_.emplace_back();
  }
  return ids;
}

void ChannelGraph::unite(int a, int b) {
  a = root(a);
  b = root(b);
  if (a != b) parent_[std::max(a, b)] = std::min(a, b);
}

void ChannelGraph::fix(int id, const std::string& reason) {
  if (fixed_[id].empty()) fixed_[id] = reason;
}

void ChannelGraph::finalize_fixed() {
  for (int id = 0; id < id_count(); ++id) {
    const int r = root(id);
    if (r != id && !fixed_[id].empty() && fixed_[r].empty()) fixed_[r] = fixed_[id];
  }
}

std::vector<double> constant_l1_norms(const onnxu::GraphView& view, const ConstantRef& ref, int axis) {
  if (ref.kind == ConstantRef::Kind::constant_of_shape) {
    const int64_t c = ref.dims.at(axis);
    const int64_t per = c ? onnxu::numel(ref.dims) / c : 0;
    return std::vector<double>(static_cast<size_t>(c), std::fabs(ref.fill) * static_cast<double>(per));
  }
  const onnx::TensorProto* t = nullptr;
  if (ref.kind == ConstantRef::Kind::initializer)
    t = view.initializer(ref.name);
  else if (const auto* a = onnxu::find_attribute(view.node(ref.node), "value"))
    t = &a->t();
  if (!t) throw_error(ErrorKind::bad_input, "constant '" + ref.name + "' has no data");
  return with_context("while computing filter norms of '" + ref.name + "'", [&] { return onnxu::l1_norms_along(*t, axis); });
}

ChannelGraph analyze_channels(const onnx::ModelProto& model, const onnxu::GraphView& view, const onnxu::ShapeMap& shapes) {
  Analyzer a{model, view, shapes, onnxu::default_opset(model), {}, {}};
  a.run();
  return std::move(a.cg);
}

}  // namespace hpcnn::prune
