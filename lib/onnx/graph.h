// hpcnn onnx: graphs of ONNX models: a read-only view (GraphView) and an editable graph (Graph)
// with producers and consumers of each value, topological order, lookup by name, and constant
// resolution.
//
// Values a node's subgraphs read from this graph (the `then_branch`/`else_branch` of If, the
// `body` of Loop and Scan: graph attributes, recursively, minus the names a subgraph defines
// itself) count as uses of that node, with input position Use::subgraph: consumer counts,
// validation and topological order include them.
//
// Construction validates the graph: every node input and subgraph read names a graph input, an
// initializer or another node's output; no value is produced twice; no cycles. ErrorKind::bad_input
// otherwise, naming the node. A GraphView keeps pointers into the GraphProto: rebuild it after
// changing the proto by other means than a Graph's edits.
//
// Graph edits the GraphProto in place and keeps every index of the view valid across edits
// (producers, consumers in node and input order, subgraph reads, node names, topological order):
// add/replace/remove initializers, edit a constant's tensor, set a node input or attribute,
// insert a node before/after another, remove nodes, redirect or rename values, fresh names.
// Each edit checks that the graph stays valid (names defined, none defined twice, no cycle) and
// throws ErrorKind::bad_input naming the node or value before changing anything otherwise.
// Node indices are positions in graph.node(): inserting or removing a node shifts the later
// ones. ONNX's checker wants nodes in topological file order: insert a node before its first
// reader (insert_before) and after its inputs' producers.
//
// Why not libonnx's IR (onnx/common/ir.h, ImportModelProto/ExportModelProto of libonnx-dev 1.x):
// import copies every tensor into onnx::Tensor and export copies it back, which would add twice
// the weights to prune-rate's peak memory (goal: under 3x the model size, 1.55x today on the
// 575 MB light VGG-19); its Tensor has no external_data, data_location or doc_string, values
// lose their doc strings and unknown fields are dropped, so an exported model is not equal as a
// protobuf message to the one read; and the converter is marked experimental. Editing the proto
// in place with an index beside it costs only the index (names and positions), keeps every field
// and subgraph as it was, and leaves a model with no edits equal to the input (tests/onnx).
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "onnx/tensor.h"

namespace hpcnn::onnxu {

struct Use {
  static constexpr int subgraph = -1;
  int node;   // index into graph.node()
  int input;  // input position, or Use::subgraph: read inside one of the node's subgraphs
};

// The graph-valued attributes of a node (If branches, Loop/Scan bodies), in attribute order.
std::vector<const onnx::GraphProto*> subgraphs(const onnx::NodeProto& node);

class GraphView {
 public:
  explicit GraphView(const onnx::GraphProto& graph);

  const onnx::GraphProto& graph() const { return *graph_; }
  const onnx::NodeProto& node(int i) const { return graph_->node(i); }
  int node_count() const { return graph_->node_size(); }
  // Node indices in topological order (stable in file order).
  const std::vector<int>& topo_order() const;

  // Index of the node producing `value`, or -1 (graph input, initializer, or unknown).
  int producer(const std::string& value) const;
  // Uses of `value`, in node order, each node's inputs in order and its subgraph reads last.
  const std::vector<Use>& consumers(const std::string& value) const;
  // Values of this graph read inside the node's subgraphs, in order of first use.
  const std::vector<std::string>& subgraph_reads(int node) const { return subgraph_reads_[node]; }
  int find_node(const std::string& name) const;  // by node name (the first such node); -1 if none
  const onnx::TensorProto* initializer(const std::string& name) const;
  bool is_graph_input(const std::string& name) const { return inputs_.count(name) > 0; }
  bool is_graph_output(const std::string& name) const { return outputs_.count(name) > 0; }
  // Whether `value` is a graph input, an initializer or a node output here.
  bool defined(const std::string& value) const {
    return producer_.count(value) || initializers_.count(value) || inputs_.count(value);
  }

  // "node 'name' (Op)" or "node #i (Op)" for nodes without a name.
  std::string describe(int node) const;

 protected:
  // The outer values node i's subgraphs read (see above).
  std::vector<std::string> reads_of(int node) const;
  // Records node i's inputs and subgraph reads as uses (sorted into consumers_).
  void add_uses(int node);
  void remove_uses(int node);
  void compute_order() const;  // ErrorKind::bad_input on a cycle

  const onnx::GraphProto* graph_;
  std::unordered_map<std::string, int> producer_;
  std::unordered_map<std::string, std::vector<Use>> consumers_;
  std::unordered_map<std::string, int> by_name_;
  std::unordered_map<std::string, const onnx::TensorProto*> initializers_;
  std::unordered_set<std::string> inputs_, outputs_;
  std::vector<std::vector<std::string>> subgraph_reads_;
  mutable std::vector<int> order_;
  mutable bool order_valid_ = false;
};

// A constant tensor in the graph (weights): an initializer (also when listed as a graph input,
// as IR version 3 requires), a Constant node's `value`, or a ConstantOfShape node whose shape
// input is itself constant (every element equal to its `value`).
struct ConstantRef {
  enum class Kind { initializer, constant_node, constant_of_shape };
  Kind kind;
  std::string name;  // the value's name in the graph
  int node = -1;     // producing node (Constant / ConstantOfShape)
  Dims dims;
  int32_t dtype = onnx::TensorProto::FLOAT;
  double fill = 0;         // ConstantOfShape: the value of every element
  std::string shape_name;  // ConstantOfShape: name of its shape input
};

std::optional<ConstantRef> find_constant(const GraphView& view, const std::string& value);

// The TensorProto holding `value` in `graph` for editing in place: an initializer, or the `value`
// attribute of the Constant node that produces it; nullptr when it is neither (an input, a
// computed value, a ConstantOfShape). No copy: the pointer lives as long as the graph is unchanged.
onnx::TensorProto* mutable_constant_tensor(onnx::GraphProto& graph, const std::string& value);

// Values of a small constant (e.g. a Reshape shape) as int64; nullopt if not constant.
std::optional<std::vector<int64_t>> constant_int64s(const GraphView& view, const std::string& value);
// The same as double (e.g. Resize scales).
std::optional<std::vector<double>> constant_doubles(const GraphView& view, const std::string& value);

// An editable graph over a GraphProto (see the notes at the top). Edits cost O(nodes + uses)
// for the index (an insertion or removal shifts later node indices); lookups are as in GraphView.
class Graph : public GraphView {
 public:
  // The main graph of `model`; its IR version decides whether new initializers are also listed
  // as graph inputs (IR version 3 requires it).
  explicit Graph(onnx::ModelProto& model);
  Graph(onnx::GraphProto& graph, int64_t ir_version);

  // --- initializers
  // Adds `tensor` as an initializer, or replaces the one of the same name (its graph-input
  // listing's dims follow). A new name must be free (not defined, not used in any subgraph).
  const onnx::TensorProto& put_initializer(onnx::TensorProto tensor);
  // Removes an initializer nothing reads (and its graph-input listing).
  void remove_initializer(const std::string& name);
  // Runs edit(tensor) on a constant's tensor (initializer or Constant node value; not
  // ConstantOfShape: change its shape input), e.g. slice_axis; an initializer's graph-input
  // listing follows its dims. The tensor's name must stay.
  void edit_constant(const ConstantRef& ref, const std::function<void(onnx::TensorProto&)>& edit);

  // --- nodes
  // Inserts `node` at index `position` (0 to node_count()) and returns it. Its inputs and
  // subgraph reads must be defined, its outputs new names (unique_value_name()).
  int insert_node(int position, onnx::NodeProto node);
  int insert_before(int anchor, onnx::NodeProto node) { return insert_node(anchor, std::move(node)); }
  int insert_after(int anchor, onnx::NodeProto node) { return insert_node(anchor + 1, std::move(node)); }
  // Removes a node whose outputs nothing reads (no consumer, no graph output).
  void remove_node(int node);
  // Makes input position `input` of `node` read `value` ("" omits an optional input; a position
  // past the end is an error).
  void set_input(int node, int input, const std::string& value);
  // Adds `attribute` to `node`, replacing the one of the same name; subgraph reads follow.
  void set_attribute(int node, const onnx::AttributeProto& attribute);
  // Sets an INT attribute (keeping the other fields of an existing one).
  void set_attribute_int(int node, const std::string& name, int64_t value);

  // --- values
  // Every read of `from` (node inputs, subgraph reads, graph outputs) reads `to` instead.
  void replace_uses(const std::string& from, const std::string& to);
  // Renames `from` everywhere (its definition, reads, graph input/output and value_info
  // entries); `to` must be a free name.
  void rename_value(const std::string& from, const std::string& to);
  // A free name derived from `base` ("base", "base_1", ...), not handed out again: value names
  // are unique across the graph and its subgraphs, node names likewise. (Names of removed or
  // renamed values are free again.)
  std::string unique_value_name(const std::string& base);
  std::string unique_node_name(const std::string& base);
  // Drops the recorded intermediate shapes (value_info is not indexed).
  void clear_value_info() { g_->clear_value_info(); }

 private:
  void shift_nodes(int from, int delta);          // node indices >= from move by delta
  bool reaches(int from_node, int target) const;  // target depends on from_node's outputs
  void sync_input_dims(const onnx::TensorProto& t);
  void rename_reads(int node, const std::string& from, const std::string& to);

  onnx::GraphProto* g_;
  int64_t ir_version_;
  std::unordered_set<std::string> value_names_, node_names_;   // defined in the graph or a subgraph
  std::unordered_set<std::string> reserved_, reserved_nodes_;  // handed out by unique_*_name()
};

// Attribute lookup with defaults.
const onnx::AttributeProto* find_attribute(const onnx::NodeProto& node, const std::string& name);
int64_t attr_int(const onnx::NodeProto& node, const std::string& name, int64_t fallback);
float attr_float(const onnx::NodeProto& node, const std::string& name, float fallback);
std::vector<int64_t> attr_ints(const onnx::NodeProto& node, const std::string& name);
std::string attr_string(const onnx::NodeProto& node, const std::string& name, const std::string& fallback);

}  // namespace hpcnn::onnxu
