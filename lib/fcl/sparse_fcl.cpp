#include "fcl/sparse_fcl.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <tuple>

#include "core/error.h"
#include "onnx/costs.h"
#include "onnx/graph.h"
#include "onnx/shapes.h"
#include "onnx/tensor.h"

namespace hpcnn::fcl {
namespace {

using json = nlohmann::ordered_json;
using onnxu::ConstantRef;
using onnxu::Dims;

// The matched layer.
struct Site {
  int flatten = -1, fc = -1, conv = -1;
  std::string x;  // the input of the flatten: [N, C, H, W] or [N, C, D, H, W]
  int64_t C = 0, O = 0;
  Dims spatial;  // [H, W] or [D, H, W]
  ConstantRef weight;
  bool weight_out_major = true;  // [O, F] (Gemm transB 1); else [F, O]
  bool has_bias = false;
};

// Positions of a feature map: H*W or D*H*W.
int64_t positions(const Site& s) {
  int64_t p = 1;
  for (int64_t d : s.spatial) p *= d;
  return p;
}

// "4x4x4" (D x H x W) or "7x7" (H x W).
std::string spatial_string(const Dims& spatial) {
  std::string out;
  for (int64_t d : spatial) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

std::string node_name(const onnxu::GraphView& v, int n) {
  const auto& nd = v.node(n);
  return nd.name().empty() ? nd.output(0) : nd.name();
}

bool channel_preserving(const std::string& op) {
  static const std::set<std::string> ops{"BatchNormalization", "Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "Tanh", "Elu",
                                         "Selu", "HardSigmoid", "HardSwish", "MaxPool", "AveragePool", "LRN", "Dropout",
                                         "Identity", "InstanceNormalization",
                                         // Global pooling leaves [N, C, 1, 1]: the inserted 1x1 Conv then reads
                                         // one value per channel, and the channel structure is a rank-c'
                                         // factorisation W [O, C] = B [O, c'] A [c', C] of the FC (tools/sparsify-fcl/README.md).
                                         "GlobalAveragePool", "GlobalMaxPool"};
  return ops.count(op) > 0;
}

const Dims* shape_of(const onnxu::ShapeMap& shapes, const std::string& v) {
  auto it = shapes.find(v);
  return it == shapes.end() ? nullptr : &it->second;
}

// C*H*W (C*D*H*W) of a known [N, C, H, W] ([N, C, D, H, W]) shape; none for another rank, an
// unknown or non-positive size, or a product beyond 2^40 (a corrupt shape: no weight is that large).
std::optional<int64_t> flattened_features(const Dims& in) {
  constexpr int64_t kMaxFeatures = int64_t{1} << 40;
  if (in.size() != 4 && in.size() != 5) return std::nullopt;
  int64_t f = 1;
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i] <= 0 || in[i] > kMaxFeatures / f) return std::nullopt;
    f *= in[i];
  }
  return f;
}

// Why flatten node n does not start the pattern ("" when it does; then `site` is filled).
std::string match(const onnxu::GraphView& v, const onnxu::ShapeMap& shapes, int n, Site& site) {
  const auto& nd = v.node(n);
  const std::string who = v.describe(n);
  if (nd.op_type() == "Flatten") {
    if (onnxu::attr_int(nd, "axis", 1) != 1) return who + " flattens at axis " + std::to_string(onnxu::attr_int(nd, "axis", 1));
  } else if (nd.op_type() != "Reshape") {
    return who + " is not a Flatten or Reshape";
  }
  const Dims* in = shape_of(shapes, nd.input(0));
  const Dims* out = shape_of(shapes, nd.output(0));
  const std::optional<int64_t> features = in ? flattened_features(*in) : std::nullopt;
  if (!features) return who + " does not read a 4-D [N, C, H, W] or 5-D [N, C, D, H, W] tensor of known C and spatial sizes";
  const int64_t F = *features;
  const std::string flat = in->size() == 4 ? "[N, C*H*W]" : "[N, C*D*H*W]";
  if (!out || out->size() != 2 || (*out)[1] != F) return who + " is not a flatten to " + flat;
  if (nd.op_type() == "Reshape") {
    auto t = onnxu::constant_int64s(v, nd.input(1));
    if (!t || t->size() != 2) return who + " has a shape input that is not a constant of 2 entries";
    if ((*t)[1] == 0) return who + " copies the channel axis (shape entry 0): a Reshape that is not a flatten";
  }
  // Forward: single consumers through Dropout / Identity to the FC.
  std::string val = nd.output(0);
  int fc = -1;
  for (;;) {
    const auto& uses = v.consumers(val);
    if (uses.size() != 1 || uses[0].input < 0)
      return who + ": its output has " + std::to_string(uses.size()) + " readers, not one FC layer";
    const auto& u = v.node(uses[0].node);
    if (u.op_type() == "Dropout" || u.op_type() == "Identity") {
      if (uses[0].input != 0) return who + " feeds " + v.describe(uses[0].node) + " at input " + std::to_string(uses[0].input);
      val = u.output(0);
      continue;
    }
    if ((u.op_type() != "Gemm" && u.op_type() != "MatMul") || uses[0].input != 0)
      return who + " feeds " + v.describe(uses[0].node) + ", not the A input of a Gemm or MatMul";
    fc = uses[0].node;
    break;
  }
  const auto& f = v.node(fc);
  if (f.op_type() == "Gemm" && onnxu::attr_int(f, "transA", 0) != 0) return v.describe(fc) + " has transA = 1";
  auto w = onnxu::find_constant(v, f.input(1));
  if (!w) return v.describe(fc) + " has a weight that is not constant";
  if (w->dtype != onnx::TensorProto::FLOAT)
    return v.describe(fc) + " has a weight of dtype " + onnxu::dtype_name(w->dtype) + ", not FLOAT";
  auto is_graph_output = [&](const std::string& value) {
    for (const auto& o : v.graph().output())
      if (o.name() == value) return true;
    return false;
  };
  if (v.consumers(w->name).size() != 1 || is_graph_output(w->name))
    return v.describe(fc) + " shares its weight '" + w->name + "' with other readers: rewriting it would change them";
  for (std::string p = f.input(0);; p = v.node(v.producer(p)).input(0)) {
    if (is_graph_output(p)) return "'" + p + "', between the flatten and " + v.describe(fc) + ", is a graph output";
    if (v.producer(p) == n) break;
    for (int k = 1; k < v.node(v.producer(p)).output_size(); ++k)  // e.g. a Dropout mask
      if (!v.node(v.producer(p)).output(k).empty() &&
          (!v.consumers(v.node(v.producer(p)).output(k)).empty() || is_graph_output(v.node(v.producer(p)).output(k))))
        return v.describe(v.producer(p)) + " has a second output that is read";
  }
  const bool out_major = f.op_type() == "Gemm" && onnxu::attr_int(f, "transB", 0) != 0;
  if (w->dims.size() != 2 || w->dims[out_major ? 1 : 0] != F)
    return v.describe(fc) + " has a weight of shape " + onnxu::dims_to_string(w->dims) + " for " + std::to_string(F) + " inputs";
  // Backward: through channel-preserving operators to a Conv.
  std::string x = nd.input(0);
  int conv = -1;
  for (int p = v.producer(x); p >= 0; p = v.producer(v.node(p).input(0))) {
    if (v.node(p).op_type() == "Conv") {
      conv = p;
      break;
    }
    if (!channel_preserving(v.node(p).op_type()) || v.node(p).input_size() < 1) break;
  }
  if (conv < 0)
    return who +
           " does not follow a Conv through only BatchNormalization/InstanceNormalization, activations, Dropout, "
           "MaxPool/AveragePool or global pooling (the FC must read the last convolution's feature map)";
  site.flatten = n;
  site.fc = fc;
  site.conv = conv;
  site.x = x;
  site.C = (*in)[1];
  site.spatial.assign(in->begin() + 2, in->end());
  site.O = w->dims[out_major ? 0 : 1];
  site.weight = *w;
  site.weight_out_major = out_major;
  site.has_bias = f.op_type() == "Gemm" && f.input_size() > 2 && !f.input(2).empty();
  return "";
}

Site find_site(const onnxu::GraphView& v, const onnxu::ShapeMap& shapes, const std::optional<std::string>& layer) {
  std::optional<Site> found;
  std::string why;
  for (int n : v.topo_order()) {
    const std::string& op = v.node(n).op_type();
    if (op != "Flatten" && op != "Reshape") continue;
    Site s;
    const std::string r = match(v, shapes, n, s);
    if (!r.empty()) {
      if (!layer) why = r;
      continue;
    }
    if (layer && node_name(v, s.fc) != *layer) continue;
    found = s;  // the last one in topological order wins
  }
  if (layer && !found) {
    // Say why the named node is not the pattern.
    for (int n = 0; n < v.node_count(); ++n) {
      if (node_name(v, n) != *layer) continue;
      const auto& nd = v.node(n);
      if (nd.op_type() != "Gemm" && nd.op_type() != "MatMul")
        throw_error(ErrorKind::unsupported, "--layer '" + *layer + "' is a " + nd.op_type() + ", not a Gemm or MatMul");
      std::string val = nd.input(0);
      int p = v.producer(val);
      while (p >= 0 && (v.node(p).op_type() == "Dropout" || v.node(p).op_type() == "Identity"))
        p = v.producer(v.node(p).input(0));
      if (p < 0) throw_error(ErrorKind::unsupported, "--layer '" + *layer + "' reads no Flatten or Reshape");
      Site s;
      throw_error(ErrorKind::unsupported,
                  "--layer '" + *layer + "' is not the first FC layer after a convolution: " + match(v, shapes, p, s));
    }
    throw_error(ErrorKind::unsupported, "--layer '" + *layer + "': no node of that name");
  }
  if (!found)
    throw_error(ErrorKind::unsupported,
                "no Conv -> Flatten/Reshape -> Gemm/MatMul pattern (the first FC layer after the last "
                "convolution)" +
                    (why.empty() ? std::string() : "; the last candidate: " + why));
  return *found;
}

// The dense weight as W[o, c*P + s] in double (P positions, s the flattened position).
std::vector<double> read_weight(const onnxu::GraphView& v, const Site& s) {
  const int64_t F = s.C * positions(s);
  std::vector<double> raw;
  if (s.weight.kind == ConstantRef::Kind::initializer) {
    for (const auto& t : v.graph().initializer())
      if (t.name() == s.weight.name) raw = onnxu::to_doubles(t);
  } else if (s.weight.kind == ConstantRef::Kind::constant_node) {
    const auto* a = onnxu::find_attribute(v.node(s.weight.node), "value");
    if (!a)
      throw_error(ErrorKind::unsupported, v.describe(s.weight.node) + " holds its weight in an attribute other than 'value'");
    raw = onnxu::to_doubles(a->t());
  } else {
    raw.assign(static_cast<size_t>(F * s.O), s.weight.fill);
  }
  if (static_cast<int64_t>(raw.size()) != F * s.O)
    throw_error(ErrorKind::bad_input,
                "weight '" + s.weight.name + "' holds " + std::to_string(raw.size()) + " values, not " + std::to_string(F * s.O));
  if (s.weight_out_major) return raw;
  std::vector<double> w(raw.size());
  for (int64_t f = 0; f < F; ++f)
    for (int64_t o = 0; o < s.O; ++o) w[static_cast<size_t>(o * F + f)] = raw[static_cast<size_t>(f * s.O + o)];
  return w;
}

onnx::TensorProto float_tensor(const std::string& name, const Dims& dims, const std::vector<double>& values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  std::string raw(values.size() * sizeof(float), '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    const float f = static_cast<float>(values[i]);
    std::memcpy(raw.data() + i * sizeof(float), &f, sizeof(float));
  }
  t.set_raw_data(std::move(raw));
  return t;
}

int64_t dense_params(const Site& s) { return s.O * s.C * positions(s) + (s.has_bias ? s.O : 0); }

// Parameters of the replacement (reduction conv with its bias, and the new FC weight and bias).
int64_t sparse_params(const Site& s, Structure st, int64_t r) {
  const int64_t HW = positions(s), bias = s.has_bias ? s.O : 0;
  return st == Structure::channel ? r * s.C + r + s.O * r * HW + bias : s.C * r * HW + s.C * r + s.O * s.C * r + bias;
}

int64_t choose_rank(const Site& s, const SparsifyOptions& o) {
  const int64_t max = o.structure == Structure::channel ? s.C : positions(s);
  const char* what = o.structure == Structure::channel ? "--channels" : "--spatial-width";
  int64_t r = 0;
  if (o.structure == Structure::channel ? o.channels.has_value() : o.spatial_width.has_value()) {
    r = o.structure == Structure::channel ? *o.channels : *o.spatial_width;
  } else {
    const double goal = *o.compression;
    for (int64_t k = max; k >= 1; --k)
      if (static_cast<double>(dense_params(s)) / static_cast<double>(sparse_params(s, o.structure, k)) >= goal) {
        r = k;
        break;
      }
    if (r == 0)
      throw_error(
          ErrorKind::usage,
          "--compression " + std::to_string(goal) + " is out of reach: at rank 1 the layer compresses " +
              std::to_string(static_cast<double>(dense_params(s)) / static_cast<double>(sparse_params(s, o.structure, 1))) + "x");
  }
  if (o.structure == Structure::spatial && max == 1)
    throw_error(ErrorKind::usage, "the feature map before the flatten is " + spatial_string(s.spatial) +
                                      " (global pooling): the spatial structure has no "
                                      "positions to combine; use --structure channel (a rank-c' factorisation of the FC)");
  if (r < 1 || r > max)
    throw_error(ErrorKind::usage, std::string(what) + " " + std::to_string(r) + " must lie in [1, " + std::to_string(max) + "]");
  if (r == max && !o.allow_full_rank)
    throw_error(ErrorKind::usage, std::string(what) + " " + std::to_string(r) + " keeps the full rank (" + std::to_string(max) +
                                      "): no compression; --allow-full-rank permits it (e.g. to check the rewrite)");
  return r;
}

// The report's `layer` object; `depth` only for a 5-D feature map.
json layer_json(const Site& s, const std::string& name, const std::string& op, const std::string& flatten,
                const std::string& conv) {
  json j = {{"name", name}, {"op", op}, {"weight", s.weight.name}, {"flatten", flatten}, {"last_conv", conv}, {"channels", s.C}};
  if (s.spatial.size() == 3) j["depth"] = s.spatial[0];
  j["height"] = s.spatial[s.spatial.size() - 2];
  j["width"] = s.spatial.back();
  j["outputs"] = s.O;
  return j;
}

double ratio(int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0; }

}  // namespace

void validate_options(const SparsifyOptions& o) {
  const bool channel = o.structure == Structure::channel;
  const int given = (o.channels ? 1 : 0) + (o.spatial_width ? 1 : 0) + (o.compression ? 1 : 0);
  if (given != 1)
    throw_error(ErrorKind::usage,
                channel ? "give one of --channels C' or --compression X" : "give one of --spatial-width K or --compression X");
  if (channel && o.spatial_width) throw_error(ErrorKind::usage, "--spatial-width goes with --structure spatial");
  if (!channel && o.channels) throw_error(ErrorKind::usage, "--channels goes with --structure channel");
  if (o.compression && !(std::isfinite(*o.compression) && *o.compression > 1))
    throw_error(ErrorKind::usage, "--compression must be a number > 1 (dense parameters / sparse parameters)");
  if (o.channels && *o.channels < 1) throw_error(ErrorKind::usage, "--channels must be >= 1");
  if (o.spatial_width && *o.spatial_width < 1) throw_error(ErrorKind::usage, "--spatial-width must be >= 1");
  if (o.init == Init::data && !channel) throw_error(ErrorKind::usage, "--init data is for the channel structure");
}

json run_sparsify(const SparsifyOptions& o) {
  validate_options(o);
  onnxu::Model model = onnxu::load_model(o.model);
  json report;
  with_context("while sparsifying '" + o.model.string() + "'", [&] {
    for (const auto& t : model.proto.graph().initializer()) onnxu::check_tensor_size(t);  // the copied ones too
    const onnxu::ShapeMap shapes = onnxu::infer_shapes(model.proto);
    onnxu::Graph g(model.proto);
    const onnxu::Costs before = onnxu::count_costs(g, shapes);
    const Site s = find_site(g, shapes, o.layer);
    const int64_t r = choose_rank(s, o);
    const int64_t HW = positions(s);
    const std::string fc_name = node_name(g, s.fc);
    spdlog::info("layer '{}': {} channels x {} -> {} outputs; {} structure, rank {}", fc_name, s.C, spatial_string(s.spatial),
                 s.O, o.structure == Structure::channel ? "channel" : "spatial", r);

    const std::vector<double> W = read_weight(g, s);
    std::vector<double> reduce_w, fc_w, approx;
    Dims reduce_dims;
    int64_t reduced_features = 0;
    std::vector<double> sigma;
    json data_info;
    if (o.init == Init::data) {
      if (!o.input_moment) throw_error(ErrorKind::usage, "--init data needs training data (--config or --data)");
      std::tie(sigma, data_info) = o.input_moment(s.x, s.C);
    }
    if (o.structure == Structure::channel) {
      ChannelFactors f = factor_channels(W, s.O, s.C, HW, r, o.init, o.seed, sigma.empty() ? nullptr : &sigma);
      approx = compose(f, s.O, s.C, HW, r);
      reduce_w = std::move(f.A);
      fc_w = std::move(f.B);
      reduce_dims = {r, s.C};
      reduce_dims.insert(reduce_dims.end(), s.spatial.size(), 1);
      reduced_features = r * HW;
    } else {
      SpatialFactors f = factor_spatial(W, s.O, s.C, HW, r, o.init, o.seed);
      approx = compose(f, s.O, s.C, HW, r);
      reduce_w = std::move(f.Q);
      fc_w = std::move(f.P);
      reduce_dims = {s.C * r, 1};
      reduce_dims.insert(reduce_dims.end(), s.spatial.begin(), s.spatial.end());
      reduced_features = s.C * r;
    }
    const double init_error = relative_error(W, approx);
    const double output_error = sigma.empty() ? -1.0 : relative_output_error(W, approx, s.O, s.C, HW, sigma);

    // The reduction Conv before the flatten.
    const std::string base = fc_name + (o.structure == Structure::channel ? ".channel_reduction" : ".spatial_reduction");
    const std::string w_name = g.unique_value_name(base + ".weight"), b_name = g.unique_value_name(base + ".bias");
    g.put_initializer(float_tensor(w_name, reduce_dims, reduce_w));
    g.put_initializer(float_tensor(b_name, {reduce_dims[0]}, std::vector<double>(static_cast<size_t>(reduce_dims[0]), 0.0)));
    onnx::NodeProto conv;
    conv.set_op_type("Conv");
    conv.set_name(g.unique_node_name(base));
    conv.add_input(s.x);
    conv.add_input(w_name);
    conv.add_input(b_name);
    const std::string reduced = g.unique_value_name(base + ".output");
    conv.add_output(reduced);
    auto ints = [&](const char* name, std::vector<int64_t> v) {
      auto* a = conv.add_attribute();
      a->set_name(name);
      a->set_type(onnx::AttributeProto::INTS);
      for (int64_t x : v) a->add_ints(x);
    };
    if (o.structure == Structure::channel) {
      ints("kernel_shape", std::vector<int64_t>(s.spatial.size(), 1));
    } else {
      ints("kernel_shape", s.spatial);
      auto* a = conv.add_attribute();
      a->set_name("group");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(s.C);
    }
    g.insert_before(s.flatten, conv);
    auto shifted = [&](int n) { return n >= s.flatten ? n + 1 : n; };  // indices after the insertion
    const int flatten = shifted(s.flatten), fc = shifted(s.fc), last_conv = shifted(s.conv);
    g.set_input(flatten, 0, reduced);
    const std::string flat_out = g.node(flatten).output(0), flatten_name = node_name(g, flatten);
    const std::string fc_op = g.node(fc).op_type(), conv_name = node_name(g, last_conv);
    // A Reshape target naming C*H*W (C*D*H*W): a fresh constant with the reduced count (the old one stays
    // for its other readers, or goes when none is left).
    std::vector<std::string> changed{flat_out};
    if (g.node(flatten).op_type() == "Reshape") {
      const std::vector<int64_t> t = *onnxu::constant_int64s(g, g.node(flatten).input(1));
      if (t[1] > 0) {
        const std::string old = g.node(flatten).input(1);
        const std::string fresh = g.unique_value_name(old + ".sparse_fcl");
        g.put_initializer(onnxu::make_int64_tensor(fresh, {t[0], reduced_features}));
        g.set_input(flatten, 1, fresh);
        auto ref = onnxu::find_constant(g, old);
        if (g.consumers(old).empty() && ref && ref->kind == ConstantRef::Kind::initializer) g.remove_initializer(old);
      }
    }
    // The FC weight: same name and layout, the reduced inputs.
    std::vector<double> stored(fc_w.size());
    if (s.weight_out_major) {
      stored = fc_w;
    } else {
      for (int64_t f = 0; f < reduced_features; ++f)
        for (int64_t oo = 0; oo < s.O; ++oo)
          stored[static_cast<size_t>(f * s.O + oo)] = fc_w[static_cast<size_t>(oo * reduced_features + f)];
    }
    const Dims fc_dims = s.weight_out_major ? Dims{s.O, reduced_features} : Dims{reduced_features, s.O};
    if (s.weight.kind == ConstantRef::Kind::initializer) {
      g.put_initializer(float_tensor(s.weight.name, fc_dims, stored));
    } else if (s.weight.kind == ConstantRef::Kind::constant_node) {  // its node index moved with the insertion
      g.edit_constant(*onnxu::find_constant(g, s.weight.name),
                      [&](onnx::TensorProto& t) { t = float_tensor(s.weight.name, fc_dims, stored); });
    } else {  // ConstantOfShape: an initializer of a fresh name takes its place
      const std::string fresh = g.unique_value_name(s.weight.name + ".sparse_fcl");
      g.put_initializer(float_tensor(fresh, fc_dims, stored));
      g.set_input(fc, 1, fresh);
      const int cos = g.producer(s.weight.name);
      if (cos >= 0 && g.consumers(s.weight.name).empty()) g.remove_node(cos);
    }
    // Shapes recorded for values between the flatten and the FC change.
    for (std::string v = flat_out; !g.consumers(v).empty();) {
      const auto& u = g.node(g.consumers(v)[0].node);
      if (u.op_type() != "Dropout" && u.op_type() != "Identity") break;
      v = u.output(0);
      changed.push_back(v);
    }
    auto* vi = model.proto.mutable_graph()->mutable_value_info();
    for (int i = vi->size() - 1; i >= 0; --i)
      if (std::find(changed.begin(), changed.end(), vi->Get(i).name()) != changed.end()) vi->DeleteSubrange(i, 1);

    const onnxu::GraphView check(model.proto.graph());
    const onnxu::ShapeMap after_shapes = onnxu::infer_shapes(model.proto);
    const onnxu::Costs after = onnxu::count_costs(check, after_shapes);
    const int64_t layer_before = dense_params(s), layer_after = sparse_params(s, o.structure, r);
    const int64_t layer_macs_before = s.O * s.C * HW;
    const int64_t layer_macs_after =
        o.structure == Structure::channel ? r * s.C * HW + s.O * r * HW : s.C * r * HW + s.O * s.C * r;
    report = {{"model", o.model.string()},
              {"output", o.output ? json(o.output->string()) : json(nullptr)},
              {"layer", layer_json(s, fc_name, fc_op, flatten_name, conv_name)},
              {"structure", o.structure == Structure::channel ? "channel" : "spatial"},
              {"rank", r},
              {"init", o.init == Init::svd    ? "svd"
                       : o.init == Init::data ? "data"
                                              : "random"},
              {"init_relative_error", init_error},
              {"layer_params_before", layer_before},
              {"layer_params_after", layer_after},
              {"layer_compression", ratio(layer_before, layer_after)},
              {"layer_macs_before", layer_macs_before},
              {"layer_macs_after", layer_macs_after},
              {"layer_macs_reduction", ratio(layer_macs_before, layer_macs_after)},
              {"params_before", before.params},
              {"params_after", after.params},
              {"model_compression", ratio(before.params, after.params)},
              {"macs_before", before.macs},
              {"macs_after", after.macs}};
    if (!sigma.empty()) {
      report["init_relative_output_error"] = output_error;
      report["data"] = data_info;
    }
    spdlog::info("layer '{}': {} -> {} parameters ({:.2f}x), model {} -> {} ({:.2f}x); init relative error {:.4g}", fc_name,
                 layer_before, layer_after, ratio(layer_before, layer_after), before.params, after.params,
                 ratio(before.params, after.params), init_error);
    if (o.output) {
      onnxu::save_model(model.proto, *o.output, onnxu::output_save_options(model, o.external_data, o.overwrite));
      spdlog::info("wrote '{}'", o.output->string());
    }
  });
  return report;
}

}  // namespace hpcnn::fcl
