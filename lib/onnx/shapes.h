// hpcnn onnx: static tensor shapes through ONNX's own shape inference (libonnx).
//
// infer_shapes() runs onnx::shape_inference on a copy of the model without the bulk of its
// weight data (only dims are needed, and small constants such as Reshape targets), so its
// memory cost does not grow with the weights. Symbolic or unknown dims are -1. A value whose
// shape could not be inferred is absent from the map. Values inside subgraphs (If branches,
// Loop/Scan bodies) are included; a name of the main graph wins over a subgraph's.
// With `declared_outputs` false the graph outputs' declared shapes are set aside, so that their
// entries are what inference derives from the nodes (absent where it cannot).
//
// Isolation: libonnx's inference can crash on a malformed model, so by default it runs in a child
// process (fork()) and a crash becomes an hpcnn::Error (bad_input) here. A process that has
// initialised MPI must not fork (Open MPI and MPICH do not support fork() after MPI_Init: registered
// memory of RDMA transports is shared with the child, and Open MPI warns or fails): the tool frame
// turns isolation off there (tool_communicator, tools/common/model_outputs.h), and inference then
// runs in the calling process. The setting is process-wide and not thread-safe to change while
// another thread infers shapes.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <unordered_map>

#include "onnx/tensor.h"

namespace hpcnn::onnxu {

using ShapeMap = std::unordered_map<std::string, Dims>;

ShapeMap infer_shapes(const onnx::ModelProto& model, bool declared_outputs = true);

// Whether infer_shapes() runs libonnx in a child process (true, the default) or in this one.
void set_shape_inference_isolation(bool in_child_process);
bool shape_inference_isolation();

}  // namespace hpcnn::onnxu
