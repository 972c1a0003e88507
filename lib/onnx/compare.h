// hpcnn onnx: whether two models compute the same function of different parameter values.
//
// structure_difference() compares what a training checkpoint must share with the model file it
// is resumed with (dist-train --resume): the graph's nodes in order (op type, domain, inputs,
// outputs, attributes; a tensor attribute by its dtype and shape only, since Constant nodes may
// hold weights), the graph inputs and outputs (names, element types, shapes) and the
// initializers (names, dtypes, shapes). Parameter values, names of nodes, doc strings and
// metadata are ignored. Returns "" when they agree, else a sentence naming the first difference
// ("initializer 'fc.weight' has shape [10, 128] in the first, [10, 64] in the second").
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

namespace hpcnn::onnxu {

std::string structure_difference(const onnx::ModelProto& first, const onnx::ModelProto& second);

}  // namespace hpcnn::onnxu
