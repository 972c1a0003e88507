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
