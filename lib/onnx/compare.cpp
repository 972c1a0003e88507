#include "onnx/compare.h"

#include <algorithm>
#include <map>
#include <utility>

#include "onnx/tensor.h"

namespace hpcnn::onnxu {

namespace {

std::string node_text(const onnx::NodeProto& n, int index) {
  return "node " + std::to_string(index) + " (" + n.op_type() + (n.name().empty() ? "" : " '" + n.name() + "'") + ")";
}

std::string list_text(const google::protobuf::RepeatedPtrField<std::string>& v) {
  std::string s = "[";
  for (int i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v.Get(i);
  return s + "]";
}

// An attribute as compared: tensors by dtype and shape, everything else whole.
std::string attribute_key(const onnx::AttributeProto& a) {
  onnx::AttributeProto c = a;
  c.clear_doc_string();
  if (c.has_t()) {
    onnx::TensorProto t;
    t.set_data_type(c.t().data_type());
    *t.mutable_dims() = c.t().dims();
    *c.mutable_t() = t;
  }
  return c.SerializeAsString();
}

std::string node_difference(const onnx::NodeProto& a, const onnx::NodeProto& b, int i) {
  if (a.op_type() != b.op_type() || a.domain() != b.domain())
    return node_text(a, i) + " in the first is " + node_text(b, i) + " in the second";
  if (list_text(a.input()) != list_text(b.input()))
    return node_text(a, i) + " reads " + list_text(a.input()) + " in the first, " + list_text(b.input()) + " in the second";
  if (list_text(a.output()) != list_text(b.output()))
    return node_text(a, i) + " writes " + list_text(a.output()) + " in the first, " + list_text(b.output()) + " in the second";
  std::map<std::string, std::string> attrs;
  for (const auto& at : a.attribute()) attrs[at.name()] = attribute_key(at);
  for (const auto& at : b.attribute()) {
    auto it = attrs.find(at.name());
    if (it == attrs.end()) return node_text(a, i) + " has attribute '" + at.name() + "' in the second only";
    if (it->second != attribute_key(at)) return node_text(a, i) + ": attribute '" + at.name() + "' differs";
    attrs.erase(it);
  }
  if (!attrs.empty()) return node_text(a, i) + " has attribute '" + attrs.begin()->first + "' in the first only";
  return "";
}

std::string value_info_difference(const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& a,
                                  const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& b, const std::string& what) {
  if (a.size() != b.size())
    return std::to_string(a.size()) + " graph " + what + "s in the first, " + std::to_string(b.size()) + " in the second";
  for (int i = 0; i < a.size(); ++i) {
    if (a.Get(i).name() != b.Get(i).name())
      return "graph " + what + " " + std::to_string(i) + " is '" + a.Get(i).name() + "' in the first, '" + b.Get(i).name() +
             "' in the second";
    if (a.Get(i).type().SerializeAsString() != b.Get(i).type().SerializeAsString())
      return "graph " + what + " '" + a.Get(i).name() + "' has another type or shape in the second";
  }
  return "";
}

}  // namespace

std::string structure_difference(const onnx::ModelProto& first, const onnx::ModelProto& second) {
  const auto& a = first.graph();
  const auto& b = second.graph();
  if (std::string d = value_info_difference(a.input(), b.input(), "input"); !d.empty()) return d;
  if (std::string d = value_info_difference(a.output(), b.output(), "output"); !d.empty()) return d;
  std::map<std::string, std::pair<int32_t, Dims>> inits;
  for (const auto& t : a.initializer()) inits[t.name()] = {t.data_type(), Dims(t.dims().begin(), t.dims().end())};
  for (const auto& t : b.initializer()) {
    auto it = inits.find(t.name());
    if (it == inits.end()) return "initializer '" + t.name() + "' is in the second only";
    const Dims dims(t.dims().begin(), t.dims().end());
    if (it->second.second != dims)
      return "initializer '" + t.name() + "' has shape " + dims_to_string(it->second.second) + " in the first, " +
             dims_to_string(dims) + " in the second";
    if (it->second.first != t.data_type()) return "initializer '" + t.name() + "' has another dtype in the second";
    inits.erase(it);
  }
  if (!inits.empty()) return "initializer '" + inits.begin()->first + "' is in the first only";
  for (int i = 0; i < std::min(a.node_size(), b.node_size()); ++i)
    if (std::string d = node_difference(a.node(i), b.node(i), i); !d.empty()) return d;
  if (a.node_size() != b.node_size())
    return std::to_string(a.node_size()) + " nodes in the first, " + std::to_string(b.node_size()) + " in the second";
  return "";
}

}  // namespace hpcnn::onnxu
