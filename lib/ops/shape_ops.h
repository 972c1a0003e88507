// hpcnn ops: Concat (with its backward split) and Softmax.
//   Concat along `axis` (negative counts from the end); all nhwc 4-D inputs with axis 1 stay
//   nhwc, anything else is made plain.
//   Softmax: opset >= 13 normalises along `axis` (default -1); opsets < 13 coerce the input to
//   2-D at `axis` (default 1) and normalise each row (legacy_2d = true).
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace hpcnn::ops {

Tensor concat_forward(const std::vector<Tensor>& xs, int64_t axis);
// Returns the slices of gy matching each input's shape (and layout when gy is nhwc).
std::vector<Tensor> concat_backward(const std::vector<Shape>& shapes, int64_t axis, const Tensor& gy);

Tensor softmax_forward(const Tensor& x, int64_t axis, bool legacy_2d);
Tensor softmax_backward(const Tensor& y, const Tensor& gy, int64_t axis, bool legacy_2d);

}  // namespace hpcnn::ops

namespace hpcnn::ops {

// Transpose with permutation `perm` (empty: reverse the dims); plain output.
Tensor transpose_forward(const Tensor& x, const std::vector<int64_t>& perm);
// The inverse permutation of perm (gradient of transpose_forward).
std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& perm, int rank);

// Constant padding: pads = [x1_begin, x2_begin, ..., x1_end, x2_end, ...] (ONNX order, >= 0).
Tensor pad_forward(const Tensor& x, const std::vector<int64_t>& pads, float value);
// Gradient: the interior of gy (the slice that holds x).
Tensor pad_backward(const Shape& x_shape, const std::vector<int64_t>& pads, const Tensor& gy);

}  // namespace hpcnn::ops
