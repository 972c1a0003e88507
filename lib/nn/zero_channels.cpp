#include "nn/zero_channels.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "nn/proto_tensor.h"
#include "onnx/graph.h"

namespace hpcnn::nn {
namespace {

// The values of a constant (initializer or Constant node) as fp32, or an undefined Tensor.
Tensor constant(const onnxu::GraphView& view, const std::string& name) {
  if (name.empty()) return {};
  if (const onnx::TensorProto* t = view.initializer(name)) return tensor_from_proto(*t);
  const int p = view.producer(name);
  if (p < 0) return {};
  const onnx::NodeProto& n = view.node(p);
  if (n.op_type() != "Constant") return {};
  const onnx::AttributeProto* a = onnxu::find_attribute(n, "value");
  return a && a->has_t() ? tensor_from_proto(a->t()) : Tensor();
}

bool all_zero(const float* p, int64_t n) {
  return std::all_of(p, p + n, [](float v) { return v == 0.0f; });
}

}  // namespace

std::vector<char> ZeroChannels::zero(const std::string& value) const {
  auto it = entries.find(value);
  return it == entries.end() ? std::vector<char>() : it->second.zero;
}

std::vector<ZeroHolder> ZeroChannels::holders(const std::string& value) const {
  std::set<ZeroHolder> out;
  std::set<std::pair<std::string, int64_t>> seen;
  std::vector<std::pair<std::string, int64_t>> work;
  const std::vector<char> z = zero(value);
  for (size_t c = 0; c < z.size(); ++c)
    if (z[c]) work.emplace_back(value, static_cast<int64_t>(c));
  while (!work.empty()) {
    const auto [v, c] = work.back();
    work.pop_back();
    if (!seen.insert({v, c}).second) continue;
    const Entry& e = entries.at(v);
    if (e.op == "Conv") {
      out.insert({e.weight, c, e.node});
      if (!e.bias.empty()) out.insert({e.bias, c, e.node});
    } else if (e.op == "BatchNormalization") {
      out.insert({e.bias, c, e.node});
      if (e.scale_zero[static_cast<size_t>(c)])
        out.insert({e.scale, c, e.node});
      else
        work.emplace_back(e.inputs[0], c);
    } else if (e.op == "Concat") {
      int64_t off = c;
      for (const auto& in : e.inputs) {
        const int64_t n = static_cast<int64_t>(entries.at(in).zero.size());
        if (off < n) {
          work.emplace_back(in, off);
          break;
        }
        off -= n;
      }
    } else {  // channel-wise ops and Add: the same channel of every input
      for (const auto& in : e.inputs) work.emplace_back(in, c);
    }
  }
  return {out.begin(), out.end()};
}

ZeroChannels analyze_zero_channels(const onnx::ModelProto& model, const std::string& origin) {
  const onnxu::GraphView view(model.graph());
  ZeroChannels zc;
  auto known = [&](const std::string& v) -> const ZeroChannels::Entry* {
    auto it = zc.entries.find(v);
    return it == zc.entries.end() ? nullptr : &it->second;
  };
  static const std::set<std::string> channel_wise = {"Relu",          "LeakyRelu", "MaxPool", "AveragePool", "GlobalAveragePool",
                                                     "GlobalMaxPool", "Dropout",   "Identity"};
  for (int i : view.topo_order()) {
    const onnx::NodeProto& n = view.node(i);
    if (n.output_size() == 0 || n.output(0).empty() || !n.domain().empty()) continue;
    const std::string& op = n.op_type();
    const std::string where = "while finding the zero channels of " + origin + ", " + view.describe(i);
    ZeroChannels::Entry e;
    e.op = op;
    e.node = n.name().empty() ? n.output(0) : n.name();
    if (op == "Conv" && n.input_size() >= 2) {
      const Tensor w = constant(view, n.input(1));
      const Tensor b = n.input_size() > 2 ? constant(view, n.input(2)) : Tensor();
      if (!w.defined() || w.rank() < 3 || (n.input_size() > 2 && !n.input(2).empty() && !b.defined())) continue;
      const int64_t cout = w.dim(0), per = w.numel() / cout;
      if (b.defined() && b.numel() != cout)
        throw_error(ErrorKind::bad_input, where + ": the bias '" + n.input(2) + "' has " + std::to_string(b.numel()) +
                                              " values for " + std::to_string(cout) + " filters");
      e.weight = n.input(1);
      if (b.defined()) e.bias = n.input(2);
      e.zero.resize(static_cast<size_t>(cout));
      for (int64_t c = 0; c < cout; ++c)
        e.zero[static_cast<size_t>(c)] = all_zero(w.data() + c * per, per) && (!b.defined() || b.data()[c] == 0.0f);
    } else if (op == "BatchNormalization" && n.input_size() >= 3) {
      const Tensor scale = constant(view, n.input(1)), bias = constant(view, n.input(2));
      if (!scale.defined() || !bias.defined()) continue;
      const int64_t C = scale.numel();
      if (bias.numel() != C)
        throw_error(ErrorKind::bad_input, where + ": the scale '" + n.input(1) + "' has " + std::to_string(C) +
                                              " values, the bias '" + n.input(2) + "' " + std::to_string(bias.numel()));
      const ZeroChannels::Entry* in = known(n.input(0));
      if (in && static_cast<int64_t>(in->zero.size()) != C)
        throw_error(ErrorKind::bad_input, where + ": the scale '" + n.input(1) + "' has " + std::to_string(C) +
                                              " values, the input '" + n.input(0) + "' " + std::to_string(in->zero.size()) +
                                              " channels");
      e.inputs = {n.input(0)};
      e.scale = n.input(1);
      e.bias = n.input(2);
      e.zero.resize(static_cast<size_t>(C));
      e.scale_zero.resize(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c) {
        const size_t k = static_cast<size_t>(c);
        e.scale_zero[k] = scale.data()[c] == 0.0f;
        e.zero[k] = bias.data()[c] == 0.0f && (e.scale_zero[k] || (in && in->zero[k]));
      }
    } else if (channel_wise.count(op) && n.input_size() >= 1) {
      const ZeroChannels::Entry* in = known(n.input(0));
      if (!in) continue;
      e.inputs = {n.input(0)};
      e.zero = in->zero;
    } else if (op == "Add" && n.input_size() == 2) {
      const ZeroChannels::Entry *a = known(n.input(0)), *b = known(n.input(1));
      if (!a || !b || a->zero.size() != b->zero.size()) continue;
      e.inputs = {n.input(0), n.input(1)};
      e.zero.resize(a->zero.size());
      for (size_t c = 0; c < e.zero.size(); ++c) e.zero[c] = a->zero[c] && b->zero[c];
    } else if (op == "Concat" && onnxu::attr_int(n, "axis", 0) == 1) {
      bool all = n.input_size() > 0;
      for (const auto& in : n.input()) all = all && known(in);
      if (!all) continue;
      for (const auto& in : n.input()) {
        const auto& z = known(in)->zero;
        e.inputs.push_back(in);
        e.zero.insert(e.zero.end(), z.begin(), z.end());
      }
    } else {
      continue;
    }
    zc.entries.emplace(n.output(0), std::move(e));
  }
  return zc;
}

}  // namespace hpcnn::nn
