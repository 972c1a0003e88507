#include "prune/surgery.h"

#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

namespace hpcnn::prune {
namespace {

std::vector<int64_t> kept_positions(const ChannelGraph& cg, const std::vector<int>& ids, const std::vector<char>& kept) {
  std::vector<int64_t> pos;
  for (size_t i = 0; i < ids.size(); ++i)
    if (kept[cg.root(ids[i])]) pos.push_back(static_cast<int64_t>(i));
  return pos;
}

// Updates the dims of a graph input that lists an initializer (IR version 3 models).
void update_input_dims(onnx::GraphProto& g, const std::string& name, const onnxu::Dims& dims) {
  for (auto& in : *g.mutable_input()) {
    if (in.name() != name || !in.type().has_tensor_type()) continue;
    auto* shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->clear_dim();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  }
}

// Adds (or replaces) an INT64 initializer; IR version < 4 requires it to be a graph input too.
void put_int64_initializer(onnx::ModelProto& model, const std::string& name, const std::vector<int64_t>& values) {
  auto* g = model.mutable_graph();
  for (auto& t : *g->mutable_initializer())
    if (t.name() == name) {
      t = onnxu::make_int64_tensor(name, values);
      update_input_dims(*g, name, {static_cast<int64_t>(values.size())});
      return;
    }
  *g->add_initializer() = onnxu::make_int64_tensor(name, values);
  if (model.ir_version() < 4) {
    auto* in = g->add_input();
    in->set_name(name);
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::INT64);
    tt->mutable_shape()->add_dim()->set_dim_value(static_cast<int64_t>(values.size()));
  }
}

// Every name defined in `g` and in its subgraphs (ONNX names are unique across the scopes).
void collect_names(const onnx::GraphProto& g, std::unordered_set<std::string>& names) {
  for (const auto& v : g.input()) names.insert(v.name());
  for (const auto& t : g.initializer()) names.insert(t.name());
  for (const auto& nd : g.node()) {
    for (const auto& o : nd.output()) names.insert(o);
    for (const auto* sg : onnxu::subgraphs(nd)) collect_names(*sg, names);
  }
}

// A name not yet taken, derived from `base`; it is taken from then on.
std::string unique_name(std::unordered_set<std::string>& taken, const std::string& base) {
  std::string name = base;
  for (int i = 1; taken.count(name); ++i) name = base + "_" + std::to_string(i);
  taken.insert(name);
  return name;
}

}  // namespace

void apply_pruning(onnx::ModelProto& model, const ChannelGraph& cg, const std::vector<char>& kept) {
  onnx::GraphProto& g = *model.mutable_graph();
  const onnxu::GraphView view(g);
  std::unordered_set<std::string> taken;
  collect_names(g, taken);

  // Group the slices by constant so ConstantOfShape dims are rewritten once.
  std::map<std::string, std::vector<const SliceAction*>> by_value;
  for (const auto& s : cg.slices) by_value[s.value].push_back(&s);
  for (const auto& [value, actions] : by_value) {
    with_context("while pruning constant '" + value + "'", [&] {
      auto ref = onnxu::find_constant(view, value);
      if (!ref) throw_error(ErrorKind::bad_input, "is no longer a constant");
      if (ref->kind == onnxu::ConstantRef::Kind::constant_of_shape) {
        onnxu::Dims dims = ref->dims;
        for (const auto* a : actions) dims[a->axis] = static_cast<int64_t>(kept_positions(cg, a->ids, kept).size());
        if (dims == ref->dims) return;
        auto* node = g.mutable_node(ref->node);
        const std::string shape_name = ref->shape_name;
        if (view.consumers(shape_name).size() == 1 && view.initializer(shape_name)) {
          put_int64_initializer(model, shape_name, dims);
        } else {
          const std::string fresh = unique_name(taken, value + "_shape");
          put_int64_initializer(model, fresh, dims);
          node->set_input(0, fresh);
        }
        return;
      }
      onnx::TensorProto* t = onnxu::constant_tensor(g, *ref);
      if (!t) throw_error(ErrorKind::bad_input, "has no tensor data");
      for (const auto* a : actions) {
        auto pos = kept_positions(cg, a->ids, kept);
        if (static_cast<int64_t>(a->ids.size()) != t->dims(a->axis))
          throw_error(ErrorKind::bad_input, "axis " + std::to_string(a->axis) + " has " + std::to_string(t->dims(a->axis)) +
                                                " entries, the channel analysis expected " + std::to_string(a->ids.size()));
        onnxu::slice_axis(*t, a->axis, pos);
      }
      if (ref->kind == onnxu::ConstantRef::Kind::initializer) update_input_dims(g, value, onnxu::dims_of(*t));
    });
  }

  for (const auto& a : cg.group_attrs) {
    auto* node = g.mutable_node(a.node);
    const int64_t n = static_cast<int64_t>(kept_positions(cg, a.ids, kept).size());
    for (auto& attr : *node->mutable_attribute())
      if (attr.name() == "group") attr.set_i(n);
  }

  // Shape-like constants: rewritten in place when nothing else reads them, else a fresh copy.
  for (const auto& r : cg.shape_inputs) {
    const std::string name = g.node(r.node).input(r.input);
    auto target = onnxu::constant_int64s(view, name);
    if (!target || r.index >= static_cast<int>(target->size()))
      throw_error(ErrorKind::bad_input, view.describe(r.node) + ": input '" + name + "' is not a constant shape");
    const int64_t n = static_cast<int64_t>(kept_positions(cg, r.ids, kept).size());
    if ((*target)[r.index] == n) continue;  // nothing removed there
    (*target)[r.index] = n;
    if (view.initializer(name) && view.consumers(name).size() == 1) {
      put_int64_initializer(model, name, *target);
    } else {
      const std::string fresh = unique_name(taken, name + "_pruned");
      put_int64_initializer(model, fresh, *target);
      g.mutable_node(r.node)->set_input(r.input, fresh);
    }
  }

  // Intermediate shapes changed: drop the recorded ones (graph outputs are never pruned).
  g.clear_value_info();
}

}  // namespace hpcnn::prune
