// hpcnn nn: conversion between onnx::TensorProto and fp32 Tensors (plain layout).
// tensor_from_proto accepts FLOAT, DOUBLE and FLOAT16 data (converted to fp32), raw or typed
// fields; ErrorKind::unsupported for other dtypes, ErrorKind::bad_input for a size mismatch,
// naming the tensor.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "tensor/tensor.h"

namespace hpcnn::nn {

Tensor tensor_from_proto(const onnx::TensorProto& proto);
onnx::TensorProto tensor_to_proto(const Tensor& t, const std::string& name);
// Reads a serialized TensorProto file (the ONNX backend test format, input_0.pb).
onnx::TensorProto read_tensor_proto(const std::string& path);

}  // namespace hpcnn::nn
