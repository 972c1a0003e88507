#include "prune/surgery.h"

#include <map>

#include "core/error.h"
#include "onnx/graph.h"

namespace hpcnn::prune {
namespace {

std::vector<int64_t> kept_positions(const ChannelGraph& cg, const std::vector<int>& ids, const std::vector<char>& kept) {
  std::vector<int64_t> pos;
  for (size_t i = 0; i < ids.size(); ++i)
    if (kept[cg.root(ids[i])]) pos.push_back(static_cast<int64_t>(i));
  return pos;
}

// A small constant `name` that node input (node, input) reads gets `values`: in place when that
// node is its only reader and it is an initializer, else as a fresh initializer `fresh_base`
// (or a variant) that the node reads instead.
void put_shape(onnxu::Graph& g, int node, int input, const std::string& name, const std::vector<int64_t>& values,
               const std::string& fresh_base) {
  if (g.initializer(name) && g.consumers(name).size() == 1) {
    g.put_initializer(onnxu::make_int64_tensor(name, values));
    return;
  }
  const std::string fresh = g.unique_value_name(fresh_base);
  g.put_initializer(onnxu::make_int64_tensor(fresh, values));
  g.set_input(node, input, fresh);
}

}  // namespace

void apply_pruning(onnx::ModelProto& model, const ChannelGraph& cg, const std::vector<char>& kept) {
  onnxu::Graph g(model);
  bool changed = false;

  // Group the slices by constant so ConstantOfShape dims are rewritten once.
  std::map<std::string, std::vector<const SliceAction*>> by_value;
  for (const auto& s : cg.slices) by_value[s.value].push_back(&s);
  for (const auto& [value, actions] : by_value) {
    with_context("while pruning constant '" + value + "'", [&] {
      auto ref = onnxu::find_constant(g, value);
      if (!ref) throw_error(ErrorKind::bad_input, "is no longer a constant");
      if (ref->kind == onnxu::ConstantRef::Kind::constant_of_shape) {
        onnxu::Dims dims = ref->dims;
        for (const auto* a : actions) dims[a->axis] = static_cast<int64_t>(kept_positions(cg, a->ids, kept).size());
        if (dims == ref->dims) return;
        put_shape(g, ref->node, 0, ref->shape_name, dims, value + "_shape");
        changed = true;
        return;
      }
      g.edit_constant(*ref, [&](onnx::TensorProto& t) {
        for (const auto* a : actions) {
          auto pos = kept_positions(cg, a->ids, kept);
          if (static_cast<int64_t>(a->ids.size()) != t.dims(a->axis))
            throw_error(ErrorKind::bad_input, "axis " + std::to_string(a->axis) + " has " + std::to_string(t.dims(a->axis)) +
                                                  " entries, the channel analysis expected " + std::to_string(a->ids.size()));
          if (pos.size() == a->ids.size()) continue;  // nothing removed on this axis
          onnxu::slice_axis(t, a->axis, pos);
          changed = true;
        }
      });
    });
  }

  for (const auto& a : cg.group_attrs) {
    const int64_t n = static_cast<int64_t>(kept_positions(cg, a.ids, kept).size());
    if (onnxu::attr_int(g.node(a.node), "group", 1) == n) continue;
    g.set_attribute_int(a.node, "group", n);
    changed = true;
  }

  // Shape-like constants: rewritten in place when nothing else reads them, else a fresh copy.
  for (const auto& r : cg.shape_inputs) {
    const std::string name = g.node(r.node).input(r.input);
    auto target = onnxu::constant_int64s(g, name);
    if (!target || r.index >= static_cast<int>(target->size()))
      throw_error(ErrorKind::bad_input, g.describe(r.node) + ": input '" + name + "' is not a constant shape");
    const int64_t n = static_cast<int64_t>(kept_positions(cg, r.ids, kept).size());
    if ((*target)[r.index] == n) continue;  // nothing removed there
    (*target)[r.index] = n;
    put_shape(g, r.node, r.input, name, *target, name + "_pruned");
    changed = true;
  }

  // Intermediate shapes changed: drop the recorded ones (graph outputs are never pruned).
  if (changed) g.clear_value_info();
}

}  // namespace hpcnn::prune
