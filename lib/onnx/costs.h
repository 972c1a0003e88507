// hpcnn onnx: the cost of a model as every tool reports it (prune-rate, sparsify-fcl, dist-train
// --evaluate and its summary, the pipeline's report): parameters and multiply-accumulates.
//
// "Parameters", the one definition of the toolkit: the elements of every floating-point
// initializer and Constant the model file stores: weights, biases, BatchNormalization's scale and
// bias and its running statistics (running_mean, running_var), and any other float constant.
// PyTorch's sum(p.numel() for p in model.parameters()) leaves the running statistics (buffers) out:
// 2 per BatchNorm channel fewer. dist-train's model log line gives both parts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "onnx/graph.h"
#include "onnx/shapes.h"

namespace hpcnn::onnxu {

struct Costs {
  int64_t params = 0;  // elements of floating-point constant tensors (weights, biases, BN parameters and statistics)
  int64_t macs = 0;    // multiply-accumulates of Conv, Gemm and MatMul with constant weights,
                       // for one forward pass at the model's input shape (symbolic dims as 1)
};

// Costs of the graph, with each constant counted as numel_after(name, dims) elements (a tool's
// planned change; numel(dims) for the model as it is). `shapes` from infer_shapes().
Costs count_costs(const GraphView& view, const ShapeMap& shapes,
                  const std::function<int64_t(const std::string& name, const Dims& dims)>& numel_after);
// The model as it is.
Costs count_costs(const GraphView& view, const ShapeMap& shapes);

// The multiply-accumulates of node `n` alone (count_costs' macs, node by node: Conv, Gemm and
// MatMul with a constant weight; 0 for every other node). The pipeline split balances its stages
// with it (nn/pipeline.h).
int64_t node_macs(const GraphView& view, const ShapeMap& shapes, int n);

}  // namespace hpcnn::onnxu
