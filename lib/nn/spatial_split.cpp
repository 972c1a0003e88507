// split_depth(): the graph rewrite of nn/spatial.h.
#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "nn/spatial.h"
#include "onnx/shapes.h"
#include "tensor/tensor.h"

namespace hpcnn::nn {

uint64_t SpatialSplit::halo_bytes_per_sample() const {
  uint64_t b = 0;
  for (const HaloPlan& h : halos) b += static_cast<uint64_t>((h.lo + h.hi) * h.channels * h.height * h.width) * sizeof(float);
  return b;
}

namespace {

const onnx::AttributeProto* attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

std::vector<int64_t> ints_attr(const onnx::NodeProto& n, const std::string& name, std::vector<int64_t> fallback) {
  const auto* a = attr(n, name);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : fallback;
}

std::string str_attr(const onnx::NodeProto& n, const std::string& name, const std::string& fallback) {
  const auto* a = attr(n, name);
  return a ? a->s() : fallback;
}

void set_ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  for (auto& a : *n.mutable_attribute())
    if (a.name() == name) {
      a.clear_ints();
      for (int64_t x : v) a.add_ints(x);
      return;
    }
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void set_int(onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void drop_attr(onnx::NodeProto& n, const std::string& name) {
  auto* attrs = n.mutable_attribute();
  for (int i = 0; i < attrs->size(); ++i)
    if (attrs->Get(i).name() == name) {
      attrs->DeleteSubrange(i, 1);
      return;
    }
}

// One window axis (Conv or pooling) of a 5-D input: size, kernel, stride, dilation, pads.
struct Axis {
  int64_t in = 0, k = 1, s = 1, d = 1, pb = 0, pe = 0;
  int64_t out() const { return (in + pb + pe - (k - 1) * d - 1) / s + 1; }
};

// The three spatial axes of a window node whose input has dims `x` ([N, C, D, H, W]).
std::array<Axis, 3> window_axes(const onnx::NodeProto& n, const onnxu::Dims& x, const std::vector<int64_t>& kernel) {
  const auto strides = ints_attr(n, "strides", {1, 1, 1}), dil = ints_attr(n, "dilations", {1, 1, 1});
  const auto pads = ints_attr(n, "pads", {0, 0, 0, 0, 0, 0});
  const std::string auto_pad = str_attr(n, "auto_pad", "NOTSET");
  std::array<Axis, 3> a;
  for (size_t i = 0; i < 3; ++i) {
    Axis& ax = a[i];
    ax.in = x[2 + i];
    ax.k = kernel.at(i);
    ax.s = strides.size() == 3 ? strides[i] : 1;
    ax.d = dil.size() == 3 ? dil[i] : 1;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t out = (ax.in + ax.s - 1) / ax.s;
      const int64_t total = std::max<int64_t>((out - 1) * ax.s + (ax.k - 1) * ax.d + 1 - ax.in, 0);
      ax.pb = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      ax.pe = total - ax.pb;
    } else if (auto_pad != "VALID" && pads.size() == 6) {
      ax.pb = pads[i];
      ax.pe = pads[3 + i];
    }
  }
  return a;
}

class Splitter {
 public:
  Splitter(const onnx::ModelProto& model, const std::string& origin, int slabs)
      : model_(model), origin_(origin), S_(slabs), shapes_(onnxu::infer_shapes(model)) {
    for (const auto& t : model.graph().initializer()) inits_[t.name()] = &t;
  }

  SpatialSplit run() {
    SpatialSplit r;
    r.slabs = S_;
    if (S_ < 1) fail("the spatial split must be >= 1, got " + std::to_string(S_));
    const auto& g = model_.graph();
    for (const auto& in : g.input()) {
      if (inits_.count(in.name())) continue;
      const onnxu::Dims& x = dims(in.name(), "graph input '" + in.name() + "'");
      if (x.size() != 5)
        fail("graph input '" + in.name() + "' has shape " + shape_to_string(x) +
             ": the spatial split cuts 5-D volumes [N, C, D, H, W] along D");
      check_depth(x[2], "graph input '" + in.name() + "'");
      r.input_depth = x[2];
      split_.insert(in.name());
    }
    for (int i = 0; i < g.node_size(); ++i) place(g.node(i), i);
    r.model = model_;
    auto* graph = r.model.mutable_graph();
    // Graph outputs that are slabs: the producer writes "<name>__slab", a SlabGather the output.
    for (const auto& out : g.output()) {
      if (!split_.count(out.name())) continue;
      const std::string slab = out.name() + "__slab";
      for (auto& n : nodes_) {
        for (auto& o : *n.mutable_output())
          if (o == out.name()) o = slab;
        for (auto& i : *n.mutable_input())
          if (i == out.name()) i = slab;
      }
      nodes_.push_back(gather_node(slab, out.name()));
      r.gathered.push_back(out.name());
    }
    graph->clear_node();
    for (auto& n : nodes_) *graph->add_node() = std::move(n);
    bool have_domain = false;
    for (const auto& o : r.model.opset_import()) have_domain |= o.domain() == kSpatialDomain;
    if (!have_domain) {
      auto* o = r.model.add_opset_import();
      o->set_domain(kSpatialDomain);
      o->set_version(1);
    }
    r.halos = std::move(halos_);
    for (const auto& n : r.model.graph().node()) {
      if (n.domain() == kSpatialDomain && n.op_type() == "SlabGather") continue;
      if (std::none_of(n.input().begin(), n.input().end(), [&](const std::string& v) { return split_.count(v) > 0; })) continue;
      for (const auto& v : n.input())
        if (inits_.count(v)) r.slab_initializers.insert(v);
    }
    for (const auto& [value, gathered] : gathered_) r.gathered.push_back(value);
    return r;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw_error(ErrorKind::usage, origin_ + ": spatial split " + std::to_string(S_) + ": " + what);
  }

  const onnxu::Dims& dims(const std::string& value, const std::string& who) const {
    // The batch dim may be symbolic; channels and spatial sizes must be known.
    const auto it = shapes_.find(value);
    const bool known = it != shapes_.end() && it->second.size() >= 3 &&
                       std::none_of(it->second.begin() + 1, it->second.end(), [](int64_t d) { return d < 0; });
    if (!known) fail(who + " has no known shape: the split needs every depth before training");
    return it->second;
  }

  void check_depth(int64_t depth, const std::string& who) const {
    if (depth % S_ != 0)
      fail(who + " has depth " + std::to_string(depth) + ", which " + std::to_string(S_) + " slabs do not divide");
  }

  static std::string describe(const onnx::NodeProto& n, int i) {
    return n.name().empty() ? "node #" + std::to_string(i) + " (" + n.op_type() + ")" : "node '" + n.name() + "' (" + n.op_type() + ")";
  }

  onnx::NodeProto gather_node(const std::string& in, const std::string& out) const {
    onnx::NodeProto n;
    n.set_op_type("SlabGather");
    n.set_domain(kSpatialDomain);
    n.set_name(out + "/slab_gather");
    n.add_input(in);
    n.add_output(out);
    set_int(n, "slabs", S_);
    set_int(n, "backward_scale", S_);
    return n;
  }

  // The whole value of a slab (a SlabGather inserted once per value).
  std::string gathered(const std::string& value) {
    auto it = gathered_.find(value);
    if (it != gathered_.end()) return it->second;
    const std::string name = value + "__gathered";
    nodes_.push_back(gather_node(value, name));
    gathered_[value] = name;
    return name;
  }

  std::vector<int64_t> conv_kernel(const onnx::NodeProto& n, const std::string& who) const {
    auto k = ints_attr(n, "kernel_shape", {});
    if (k.empty() && n.input_size() > 1) {
      auto it = inits_.find(n.input(1));
      if (it != inits_.end() && it->second->dims_size() == 5) k = {it->second->dims(2), it->second->dims(3), it->second->dims(4)};
    }
    if (k.size() != 3) fail(who + ": its 3-D kernel is not known (kernel_shape or a weight initializer [M, C, kD, kH, kW])");
    return k;
  }

  void place_conv(onnx::NodeProto n, const std::string& who) {
    const onnxu::Dims& x = dims(n.input(0), who + "'s input");
    if (x.size() != 5) fail(who + " reads the slab '" + n.input(0) + "' but is not a 3-D convolution");
    auto ax = window_axes(n, x, conv_kernel(n, who));
    const Axis& D = ax[0];
    const int64_t Ds = D.in / S_;
    if (D.out() * D.s != D.in || Ds % D.s != 0)
      fail(who + ": output depth " + std::to_string(D.out()) + " x stride " + std::to_string(D.s) + " != input depth " +
           std::to_string(D.in) + " (or the slab depth " + std::to_string(Ds) +
           " is not a multiple of the stride): its output slabs would not line up (use SAME padding and a stride that divides the slab depth)");
    const int64_t lo = D.pb, hi = (D.k - 1) * D.d - D.pb - (D.s - 1);
    if (hi < 0) fail(who + ": a depth kernel " + std::to_string(D.k) + " smaller than its stride " + std::to_string(D.s) + " is not supported");
    if (lo > Ds || hi > Ds)
      fail(who + " needs a halo of " + std::to_string(std::max(lo, hi)) + " planes, thicker than the slab of " + std::to_string(Ds) +
           " planes (input depth " + std::to_string(D.in) + " / " + std::to_string(S_) + ")");
    const std::string halo = n.input(0) + "__halo";
    onnx::NodeProto h;
    h.set_op_type("HaloExchange");
    h.set_domain(kSpatialDomain);
    h.set_name(who + "/halo");
    h.add_input(n.input(0));
    h.add_output(halo);
    set_int(h, "lo", lo);
    set_int(h, "hi", hi);
    nodes_.push_back(h);
    halos_.push_back({who, lo, hi, x[1], x[3], x[4]});
    n.set_input(0, halo);
    split_.insert(halo);
    drop_attr(n, "auto_pad");
    set_ints(n, "pads", {0, ax[1].pb, ax[2].pb, 0, ax[1].pe, ax[2].pe});
    for (const auto& o : n.output()) split_.insert(o);
    nodes_.push_back(std::move(n));
  }

  void place_pool(const onnx::NodeProto& n, const std::string& who) {
    const onnxu::Dims& x = dims(n.input(0), who + "'s input");
    if (x.size() != 5) fail(who + " reads the slab '" + n.input(0) + "' but is not a 3-D pooling");
    const auto ax = window_axes(n, x, ints_attr(n, "kernel_shape", {1, 1, 1}));
    const Axis& D = ax[0];
    const int64_t Ds = D.in / S_;
    const int64_t reach = (D.k - 1) * D.d + 1;
    if (D.pb != 0 || D.pe != 0 || reach > D.s || Ds % D.s != 0)
      fail(who + " would cut a pooling window at a slab boundary: depth window " + std::to_string(reach) + ", stride " +
           std::to_string(D.s) + ", depth pads " + std::to_string(D.pb) + "/" + std::to_string(D.pe) + ", slab depth " +
           std::to_string(Ds) + " (windows must not overlap, carry no depth padding, and tile the slab)");
    check_depth(D.out(), who + "'s output");
    split_.insert(n.output(0));
    nodes_.push_back(n);
  }

  // A value without a depth extent (broadcast along D): rank < 3 of a 5-D op, or D dim 1.
  bool depthless(const std::string& value) const {
    auto init = inits_.find(value);
    std::vector<int64_t> d;
    if (init != inits_.end()) {
      d.assign(init->second->dims().begin(), init->second->dims().end());
    } else {
      auto it = shapes_.find(value);
      if (it == shapes_.end()) return false;
      d = it->second;
    }
    return d.size() < 3 || d[d.size() - 3] == 1;
  }

  void place(const onnx::NodeProto& node, int index) {
    std::vector<int> on_slab;
    for (int i = 0; i < node.input_size(); ++i)
      if (split_.count(node.input(i))) on_slab.push_back(i);
    if (on_slab.empty()) {
      nodes_.push_back(node);
      return;
    }
    const std::string who = describe(node, index);
    const std::string& op = node.op_type();
    const bool domain_default = node.domain().empty() || node.domain() == "ai.onnx";
    if (domain_default && op == "Conv" && on_slab == std::vector<int>{0}) return place_conv(node, who);
    if (domain_default && (op == "MaxPool" || op == "AveragePool") && on_slab == std::vector<int>{0}) return place_pool(node, who);
    if (domain_default && op == "BatchNormalization" && on_slab == std::vector<int>{0}) {
      for (int i = 1; i < node.output_size(); ++i)
        if (!node.output(i).empty())
          fail(who + " normalises a slab and has running-statistics outputs (output " + std::to_string(i) +
               "): under a spatial split only its first output is supported");
      onnx::NodeProto n = node;  // the group's batch statistics (nn/spatial.h)
      n.set_domain(kSpatialDomain);
      split_.insert(node.output(0));
      nodes_.push_back(std::move(n));
      return;
    }
    static const std::set<std::string> unary{"Relu", "LeakyRelu", "Tanh", "Sigmoid", "Clip", "Dropout", "Identity"};
    if (domain_default && unary.count(op) && on_slab == std::vector<int>{0}) {
      split_.insert(node.output(0));
      nodes_.push_back(node);
      return;
    }
    if (domain_default && (op == "Add" || op == "Sub" || op == "Mul") && node.input_size() == 2) {
      const int other = on_slab.size() == 2 ? -1 : 1 - on_slab[0];
      if (other < 0 || depthless(node.input(other))) {
        split_.insert(node.output(0));
        nodes_.push_back(node);
        return;
      }
    }
    // Anything else reads the whole volume: gather its slab inputs first.
    onnx::NodeProto n = node;
    for (int i : on_slab) n.set_input(i, gathered(node.input(i)));
    nodes_.push_back(std::move(n));
  }

  const onnx::ModelProto& model_;
  const std::string& origin_;
  const int S_;
  const onnxu::ShapeMap shapes_;
  std::map<std::string, const onnx::TensorProto*> inits_;
  std::set<std::string> split_;
  std::map<std::string, std::string> gathered_;
  std::vector<onnx::NodeProto> nodes_;
  std::vector<HaloPlan> halos_;
};

}  // namespace

SpatialSplit split_depth(const onnx::ModelProto& model, const std::string& origin, int slabs) {
  return Splitter(model, origin, slabs).run();
}

}  // namespace hpcnn::nn
