#include "prune/masking.h"

#include <cstring>
#include <set>

#include "core/error.h"
#include "onnx/graph.h"
#include "onnx/tensor.h"

namespace hpcnn::prune {
namespace {

// Sets the slices `channels` along `axis` of the FLOAT constant `name` to 0.
void zero_slices(onnx::GraphProto& g, const std::string& node, const std::string& name, int axis,
                 const std::vector<int64_t>& channels, int64_t expected) {
  onnx::TensorProto* t = onnxu::mutable_constant_tensor(g, name);
  if (!t || t->data_type() != onnx::TensorProto::FLOAT)
    throw_error(ErrorKind::unsupported, node + ": '" + name + "' is " +
                                            (t ? "of dtype " + onnxu::dtype_name(t->data_type()) + ", not FLOAT"
                                               : std::string("not an initializer or a Constant node")) +
                                            "; --mask-channels zeroes FLOAT constants");
  onnxu::check_tensor_size(*t);
  if (axis >= t->dims_size() || t->dims(axis) != expected)
    throw_error(ErrorKind::bad_input, node + ": '" + name + "' has shape " + onnxu::dims_to_string(onnxu::dims_of(*t)) +
                                          ", the channel analysis expected " + std::to_string(expected) + " channels on axis " +
                                          std::to_string(axis));
  onnxu::ensure_raw(*t);
  std::vector<float> w(static_cast<size_t>(onnxu::numel(*t)));
  std::memcpy(w.data(), t->raw_data().data(), w.size() * sizeof(float));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= t->dims(d);
  for (int d = axis + 1; d < t->dims_size(); ++d) inner *= t->dims(d);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c : channels) std::fill_n(w.begin() + (o * expected + c) * inner, inner, 0.0f);
  t->set_raw_data(w.data(), w.size() * sizeof(float));
}

}  // namespace

std::vector<MaskedTensor> apply_channel_mask(onnx::ModelProto& model, const ChannelGraph& cg, const std::vector<char>& kept) {
  onnx::GraphProto& g = *model.mutable_graph();
  std::vector<MaskedTensor> out;
  std::set<std::string> done;  // a constant shared by several layers is zeroed once
  auto zero = [&](const std::string& node, const std::string& name, int axis, const std::vector<int64_t>& channels,
                  int64_t expected) {
    if (!done.insert(name).second) return;
    zero_slices(g, node, name, axis, channels, expected);
    out.push_back({node, name, axis, channels});
  };
  for (const Layer& L : cg.layers) {
    std::vector<int64_t> removed;
    for (int64_t c = 0; c < L.channels; ++c)
      if (!kept[cg.root(L.ids[static_cast<size_t>(c)])]) removed.push_back(c);
    if (removed.empty()) continue;
    const onnx::NodeProto& n = g.node(L.node);
    const std::string where = "node '" + L.name + "' (" + L.op + ")";
    zero(L.name, L.weight.name, L.weight_axis, removed, L.channels);
    if ((L.op == "Conv" || L.op == "Gemm") && n.input_size() > 2 && !n.input(2).empty()) {
      const onnx::TensorProto* b = onnxu::mutable_constant_tensor(g, n.input(2));
      if (!b)
        throw_error(ErrorKind::unsupported, where + ": its bias '" + n.input(2) + "' is not an initializer or a Constant node");
      if (L.op == "Conv" || (b->dims_size() == 1 && b->dims(0) == L.channels))
        zero(L.name, n.input(2), 0, removed, L.channels);
      else if (onnxu::numel(*b) != 1)  // a Gemm bias broadcast over rows [M, N] cannot be masked per neuron here
        throw_error(ErrorKind::unsupported, where + ": its bias '" + n.input(2) + "' has shape " +
                                                onnxu::dims_to_string(onnxu::dims_of(*b)) + ", not [" +
                                                std::to_string(L.channels) + "]");
    }
    const std::string& y = n.output(0);
    for (int i = 0; i < g.node_size(); ++i) {
      const onnx::NodeProto& bn = g.node(i);
      if (bn.op_type() != "BatchNormalization" || bn.input_size() < 3 || bn.input(0) != y) continue;
      const std::string bn_name = bn.name().empty() ? bn.output(0) : bn.name();
      zero(bn_name, bn.input(1), 0, removed, L.channels);
      zero(bn_name, bn.input(2), 0, removed, L.channels);
    }
  }
  return out;
}

}  // namespace hpcnn::prune
