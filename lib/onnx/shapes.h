// hpcnn onnx: static tensor shapes through ONNX's own shape inference (libonnx).
//
// infer_shapes() runs onnx::shape_inference on a copy of the model without the bulk of its
// weight data (only dims are needed, and small constants such as Reshape targets), so its
// memory cost does not grow with the weights. Symbolic or unknown dims are -1. A value whose
// shape could not be inferred is absent from the map. Values inside subgraphs (If branches,
// Loop/Scan bodies) are included; a name of the main graph wins over a subgraph's.
// With `declared_outputs` false the graph outputs' declared shapes are set aside, so that their
// entries are what inference derives from the nodes (absent where it cannot).
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <unordered_map>

#include "onnx/tensor.h"

namespace hpcnn::onnxu {

using ShapeMap = std::unordered_map<std::string, Dims>;

ShapeMap infer_shapes(const onnx::ModelProto& model, bool declared_outputs = true);

}  // namespace hpcnn::onnxu
