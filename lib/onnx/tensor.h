// hpcnn onnx: helpers on onnx::TensorProto (dtype, element count, values, slicing).
//
// Tensors are dense, row-major (C order), with the dims of the proto. Numeric data may sit in
// raw_data (little-endian) or in the typed repeated fields; these helpers accept both.
// Errors: ErrorKind::bad_input when the data size does not match the dims (naming the tensor),
// ErrorKind::unsupported for dtypes a function cannot handle (strings, complex, sub-byte).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hpcnn::onnxu {

using Dims = std::vector<int64_t>;

// Product of dims (1 for a scalar). ErrorKind::bad_input for negative dims or overflow.
int64_t numel(const Dims& dims);
int64_t numel(const onnx::TensorProto& t);
Dims dims_of(const onnx::TensorProto& t);
std::string dims_to_string(const Dims& dims);
std::string dtype_name(int32_t dtype);
bool is_floating(int32_t dtype);

// Size in bytes of one element of a fixed-size dtype; ErrorKind::unsupported otherwise.
size_t element_size(int32_t dtype);

// Moves the values of the typed repeated fields into raw_data (little-endian), so that the
// tensor can be sliced as bytes. Checks that the byte count equals numel * element_size.
void ensure_raw(onnx::TensorProto& t);

// Checks that a tensor holds as many values as its shape says (raw bytes, or the typed field's
// count); external data must be loaded. ErrorKind::bad_input naming the tensor.
void check_tensor_size(const onnx::TensorProto& t);

// Values converted to double (FLOAT, DOUBLE, FLOAT16, BFLOAT16 and integer dtypes).
std::vector<double> to_doubles(const onnx::TensorProto& t);
std::vector<int64_t> to_int64s(const onnx::TensorProto& t);

// Calls fn(const float*, n) over the values of a FLOAT tensor in order, in pieces (no copy of a
// raw_data tensor other than alignment-sized pieces). For DOUBLE/FLOAT16 it converts pieces.
template <class Fn>
void for_each_float_block(const onnx::TensorProto& t, Fn&& fn);

// Sum of |w| over every index except `axis`, for each index along `axis`: the L1 norm of each
// filter (axis 0 of a Conv weight [Cout, Cin/g, kH, kW]) or neuron. Accumulated in double.
std::vector<double> l1_norms_along(const onnx::TensorProto& t, int axis);

// Keeps only the indices `keep` (ascending, unique, in range) along `axis`, in place.
void slice_axis(onnx::TensorProto& t, int axis, const std::vector<int64_t>& keep);

// A new INT64 tensor holding `values` as a 1-D tensor.
onnx::TensorProto make_int64_tensor(const std::string& name, const std::vector<int64_t>& values);

// --- implementation of the template --------------------------------------------------------
void for_each_float_block_impl(const onnx::TensorProto& t, void (*cb)(void*, const float*, size_t), void* ctx);
template <class Fn>
void for_each_float_block(const onnx::TensorProto& t, Fn&& fn) {
  for_each_float_block_impl(
      t, [](void* ctx, const float* p, size_t n) { (*static_cast<Fn*>(ctx))(p, n); }, &fn);
}

}  // namespace hpcnn::onnxu
