#include "prune/magnitude.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>

#include "core/error.h"
#include "onnx/graph.h"
#include "onnx/tensor.h"

namespace hpcnn::prune {

namespace {

int64_t prune_tensor(onnx::TensorProto& t, double rate) {
  onnxu::ensure_raw(t);
  const int64_t n = onnxu::numel(t);
  std::vector<float> w(static_cast<size_t>(n));
  std::memcpy(w.data(), t.raw_data().data(), w.size() * sizeof(float));
  const auto k = static_cast<int64_t>(std::floor(rate * static_cast<double>(n)));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  auto smaller = [&](int64_t a, int64_t b) {
    const float ma = std::fabs(w[static_cast<size_t>(a)]), mb = std::fabs(w[static_cast<size_t>(b)]);
    return ma < mb || (ma == mb && a < b);
  };
  if (k > 0) std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), smaller);
  for (int64_t j = 0; j < k; ++j) w[static_cast<size_t>(order[static_cast<size_t>(j)])] = 0.0f;
  t.set_raw_data(w.data(), w.size() * sizeof(float));
  return std::count(w.begin(), w.end(), 0.0f);
}

}  // namespace

std::vector<MagnitudeLayer> magnitude_prune(onnx::ModelProto& model, double rate) {
  if (!std::isfinite(rate) || rate < 0.0 || rate >= 1.0)
    throw_error(ErrorKind::usage, "--unstructured " + std::to_string(rate) + ": the fraction of zeros must be in [0, 1)");
  onnx::GraphProto& g = *model.mutable_graph();
  std::vector<MagnitudeLayer> out;
  std::set<std::string> done;
  for (const auto& node : g.node()) {
    if ((node.op_type() != "Conv" && node.op_type() != "Gemm") || node.input_size() < 2) continue;
    const std::string& name = node.input(1);
    if (!done.insert(name).second) continue;
    onnx::TensorProto* t = onnxu::mutable_constant_tensor(g, name);
    if (!t || t->data_type() != onnx::TensorProto::FLOAT)
      throw_error(ErrorKind::unsupported, "node '" + node.name() + "' (" + node.op_type() + "): its weight '" + name + "' is " +
                                              (t ? "of dtype " + onnxu::dtype_name(t->data_type()) + ", not FLOAT"
                                                 : std::string("not an initializer or a Constant node")) +
                                              "; magnitude pruning needs FLOAT constants");
    onnxu::check_tensor_size(*t);
    MagnitudeLayer l{node.name(), name, onnxu::numel(*t), 0};
    l.zeros = prune_tensor(*t, rate);
    out.push_back(l);
  }
  if (out.empty()) throw_error(ErrorKind::bad_input, "the model has no Conv or Gemm weight to prune");
  return out;
}

}  // namespace hpcnn::prune
