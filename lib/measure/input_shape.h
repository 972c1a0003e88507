// hpcnn measure: the model's image input against the data, checked when both are opened, before any
// batch runs (a mismatch used to surface as a shape error deep in the first node that ran).
//
// check_input_shape(): the graph's one runtime input (the first graph input that is not an
// initializer) must be 4-D [N, C, H, W] (5-D [N, C, D, H, W] for volumes) where its declared dims
// are known (a dim_param or a missing dim matches anything) and those dims must equal the
// samples' channels, (depth,) height and width. ErrorKind::bad_input naming the model, its input and both shapes, and the data files:
//   "the model model.onnx takes 'x' of shape [N, 1, 28, 28]; the images of cifar.bin are
//    [3, 32, 32] (channels, height, width)".
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "data/source.h"

namespace hpcnn::measure {

void check_input_shape(const onnx::ModelProto& model, const std::string& model_origin, const data::SampleSource& samples);

// Regression: the first output's width (shape [N, K] as onnx/shapes.h infers it) must equal the
// targets per sample; ErrorKind::bad_input naming the model, its output and the targets file.
// Nothing is checked where inference leaves the width unknown (the loss then checks each batch).
void check_output_width(const onnx::ModelProto& model, const std::string& model_origin, int64_t width,
                        const std::string& targets_origin);

}  // namespace hpcnn::measure
