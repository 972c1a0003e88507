// hpcnn prune: the check of a pruned model before it is written.
//
// ONNX's own checks are not enough for this: strict shape inference and
// onnx.checker.check_model(full_check=True) both accept, e.g., a Conv that gets 8 input channels
// from a Resize whose constant `sizes` still names them while its weight was sliced to 5.
//
// verify_pruned() re-infers the shapes of `pruned` (onnxu::infer_shapes, graph outputs' declared
// shapes set aside) and checks, in the main graph and in every subgraph, the counts that the
// operator facts (onnx/op_facts.h) tie together:
//  - Conv: input channels (X dim 1) == weight dim 1 * group;
//  - Gemm: input features (A dim 1, dim 0 with transA) == B dim 0 (dim 1 with transB);
//  - MatMul: A's last dim == B's second-to-last (B's only dim when B is 1-D);
//  - BatchNormalization, InstanceNormalization: X dim 1 == the length of each per-channel
//    parameter and running statistic (scale, B, mean, var);
//  - every graph output has the shape it had in the input model.
// `original` holds the shapes of the input model, from onnxu::infer_shapes(input,
// /*declared_outputs=*/false). A count that `original` knew must still be known; counts unknown
// in both are not checked.
// Errors: ErrorKind::unsupported (an internal error of the pruning: the tool exits with 4 and
// writes nothing), naming the node or graph output and both counts or shapes.
#pragma once

#include <onnx/onnx_pb.h>

#include "onnx/shapes.h"

namespace hpcnn::prune {

void verify_pruned(const onnx::ModelProto& pruned, const onnxu::ShapeMap& original);

}  // namespace hpcnn::prune
