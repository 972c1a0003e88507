#include "onnx/shapes.h"

#include <onnx/shape_inference/implementation.h>
#include <spdlog/spdlog.h>

namespace hpcnn::onnxu {
namespace {

constexpr size_t kKeepBytes = 4096;  // constants up to this size keep their data

void strip(onnx::TensorProto& t) {
  const size_t bytes = t.raw_data().size() + 4 * (t.float_data_size() + t.int32_data_size()) +
                       8 * (t.int64_data_size() + t.double_data_size() + t.uint64_data_size());
  if (bytes <= kKeepBytes) return;
  t.clear_raw_data(); t.clear_float_data(); t.clear_int32_data();
  t.clear_int64_data(); t.clear_double_data(); t.clear_uint64_data();
}

void add_shape(ShapeMap& out, const onnx::ValueInfoProto& v) {
  if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return;
  Dims d;
  for (const auto& dim : v.type().tensor_type().shape().dim())
    d.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
  out[v.name()] = std::move(d);
}

}  // namespace

ShapeMap infer_shapes(const onnx::ModelProto& model) {
  // Skeleton: the model without large tensor payloads (copied piece by piece, so the copy
  // never holds the weights).
  onnx::ModelProto skel;
  skel.set_ir_version(model.ir_version());
  *skel.mutable_opset_import() = model.opset_import();
  *skel.mutable_functions() = model.functions();
  const auto& src = model.graph();
  auto* g = skel.mutable_graph();
  *g->mutable_input() = src.input();
  *g->mutable_output() = src.output();
  for (const auto& t : src.initializer()) {
    auto* c = g->add_initializer();
    c->set_name(t.name());
    c->set_data_type(t.data_type());
    *c->mutable_dims() = t.dims();
    const size_t bytes = t.raw_data().size() + 4 * (t.float_data_size() + t.int32_data_size()) +
                         8 * (t.int64_data_size() + t.double_data_size() + t.uint64_data_size());
    if (bytes <= kKeepBytes) c->CopyFrom(t);
  }
  for (const auto& n : src.node()) {
    auto* c = g->add_node();
    c->CopyFrom(n);
    for (auto& a : *c->mutable_attribute())
      if (a.has_t()) strip(*a.mutable_t());
  }
  g->clear_value_info();
  try {
    onnx::ShapeInferenceOptions opts{/*check_type=*/false, /*error_mode=*/0, /*enable_data_propagation=*/true};
    onnx::shape_inference::InferShapes(skel, onnx::OpSchemaRegistry::Instance(), opts);
  } catch (const std::exception& e) {
    spdlog::warn("shape inference stopped early: {}", e.what());
  }
  ShapeMap out;
  for (const auto& t : g->initializer()) out[t.name()] = dims_of(t);
  for (const auto& v : g->input()) add_shape(out, v);
  for (const auto& v : g->value_info()) add_shape(out, v);
  for (const auto& v : g->output()) add_shape(out, v);
  return out;
}

}  // namespace hpcnn::onnxu
