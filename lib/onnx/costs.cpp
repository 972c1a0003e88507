#include "onnx/costs.h"

namespace hpcnn::onnxu {

namespace {

int64_t macs_of(const GraphView& view, const ShapeMap& shapes, int n,
                const std::function<int64_t(const std::string& name, const Dims& dims)>& numel_after) {
  auto dim_or_1 = [&](const std::string& v, int axis) -> int64_t {
    auto it = shapes.find(v);
    if (it == shapes.end() || axis >= static_cast<int>(it->second.size()) || it->second[axis] < 0) return 1;
    return it->second[axis];
  };
  const auto& nd = view.node(n);
  const std::string& op = nd.op_type();
  if ((op != "Conv" && op != "Gemm" && op != "MatMul") || nd.input_size() < 2) return 0;
  auto w = find_constant(view, nd.input(1));
  if (!w) return 0;
  const int64_t wn = numel_after(w->name, w->dims);
  int64_t rows = 1;
  if (op == "Conv") {
    auto it = shapes.find(nd.output(0));
    if (it != shapes.end())
      for (size_t i = 0; i < it->second.size(); ++i)
        if (i != 1) rows *= dim_or_1(nd.output(0), static_cast<int>(i));
  } else if (op == "Gemm") {
    rows = dim_or_1(nd.input(0), attr_int(nd, "transA", 0) ? 1 : 0);
  } else {
    auto it = shapes.find(nd.output(0));
    if (it != shapes.end())
      for (size_t i = 0; i + 1 < it->second.size(); ++i) rows *= dim_or_1(nd.output(0), static_cast<int>(i));
  }
  return rows * wn;
}

}  // namespace

Costs count_costs(const GraphView& view, const ShapeMap& shapes,
                  const std::function<int64_t(const std::string& name, const Dims& dims)>& numel_after) {
  Costs c;
  for (const auto& t : view.graph().initializer())
    if (is_floating(t.data_type())) c.params += numel_after(t.name(), dims_of(t));
  for (int n = 0; n < view.node_count(); ++n) {
    const auto& nd = view.node(n);
    if ((nd.op_type() == "Constant" || nd.op_type() == "ConstantOfShape") && nd.output_size()) {
      auto ref = find_constant(view, nd.output(0));
      if (ref && is_floating(ref->dtype)) c.params += numel_after(ref->name, ref->dims);
    }
    c.macs += macs_of(view, shapes, n, numel_after);
  }
  return c;
}

int64_t node_macs(const GraphView& view, const ShapeMap& shapes, int n) {
  return macs_of(view, shapes, n, [](const std::string&, const Dims& dims) { return numel(dims); });
}

Costs count_costs(const GraphView& view, const ShapeMap& shapes) {
  return count_costs(view, shapes, [](const std::string&, const Dims& dims) { return numel(dims); });
}

}  // namespace hpcnn::onnxu
