// hpcnn onnx: a read-only view of an ONNX graph: producers and consumers of each value,
// topological order, lookup by name, and constant resolution.
//
// Values a node's subgraphs read from this graph (the `then_branch`/`else_branch` of If, the
// `body` of Loop and Scan: graph attributes, recursively, minus the names a subgraph defines
// itself) count as uses of that node, with input position Use::subgraph: consumer counts,
// validation and topological order include them.
//
// Construction validates the graph: every node input and subgraph read names a graph input, an
// initializer or another node's output; no value is produced twice; no cycles. ErrorKind::bad_input
// otherwise, naming the node. The view keeps pointers into the GraphProto: rebuild it after
// adding or removing nodes.
#pragma once

#include <onnx/onnx_pb.h>

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
  // Node indices in topological order.
  const std::vector<int>& topo_order() const { return order_; }

  // Index of the node producing `value`, or -1 (graph input, initializer, or unknown).
  int producer(const std::string& value) const;
  const std::vector<Use>& consumers(const std::string& value) const;
  // Values of this graph read inside the node's subgraphs, in order of first use.
  const std::vector<std::string>& subgraph_reads(int node) const { return subgraph_reads_[node]; }
  int find_node(const std::string& name) const;  // by node name; -1 if none
  const onnx::TensorProto* initializer(const std::string& name) const;
  bool is_graph_input(const std::string& name) const { return inputs_.count(name) > 0; }
  bool is_graph_output(const std::string& name) const { return outputs_.count(name) > 0; }

  // "node 'name' (Op)" or "node #i (Op)" for nodes without a name.
  std::string describe(int node) const;

 private:
  const onnx::GraphProto* graph_;
  std::unordered_map<std::string, int> producer_;
  std::unordered_map<std::string, std::vector<Use>> consumers_;
  std::unordered_map<std::string, int> by_name_;
  std::unordered_map<std::string, const onnx::TensorProto*> initializers_;
  std::unordered_set<std::string> inputs_, outputs_;
  std::vector<std::vector<std::string>> subgraph_reads_;
  std::vector<int> order_;
};

// A constant tensor in the graph (weights): an initializer (also when listed as a graph input,
// as IR version 3 requires), a Constant node's `value`, or a ConstantOfShape node whose shape
// input is itself constant (every element equal to its `value`).
struct ConstantRef {
  enum class Kind { initializer, constant_node, constant_of_shape };
  Kind kind;
  std::string name;                    // the value's name in the graph
  int node = -1;                       // producing node (Constant / ConstantOfShape)
  Dims dims;
  int32_t dtype = onnx::TensorProto::FLOAT;
  double fill = 0;                     // ConstantOfShape: the value of every element
  std::string shape_name;              // ConstantOfShape: name of its shape input
};

std::optional<ConstantRef> find_constant(const GraphView& view, const std::string& value);

// The tensor a ConstantRef points to in `graph` (initializer or Constant value); nullptr for
// ConstantOfShape.
onnx::TensorProto* constant_tensor(onnx::GraphProto& graph, const ConstantRef& ref);

// Values of a small constant (e.g. a Reshape shape) as int64; nullopt if not constant.
std::optional<std::vector<int64_t>> constant_int64s(const GraphView& view, const std::string& value);
// The same as double (e.g. Resize scales).
std::optional<std::vector<double>> constant_doubles(const GraphView& view, const std::string& value);

// Attribute lookup with defaults.
const onnx::AttributeProto* find_attribute(const onnx::NodeProto& node, const std::string& name);
int64_t attr_int(const onnx::NodeProto& node, const std::string& name, int64_t fallback);
float attr_float(const onnx::NodeProto& node, const std::string& name, float fallback);
std::vector<int64_t> attr_ints(const onnx::NodeProto& node, const std::string& name);
std::string attr_string(const onnx::NodeProto& node, const std::string& name, const std::string& fallback);

}  // namespace hpcnn::onnxu
