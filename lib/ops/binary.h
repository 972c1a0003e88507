// hpcnn ops: broadcasting element-wise Add, Sub, Mul (numpy multidirectional broadcasting) and
// the gradient reduction back to an operand's shape. Same-shape, same-layout operands run
// directly in their layout (nhwc included); otherwise operands are made plain.
#pragma once

#include "tensor/tensor.h"

namespace hpcnn::ops {

enum class BinaryOp { add, sub, mul };

Shape broadcast_shape(const Shape& a, const Shape& b);  // ErrorKind::bad_input if incompatible
Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b);
// Gradients of a and b (null pointers skipped); each has its operand's shape.
void binary_backward(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& gy, Tensor* ga, Tensor* gb);
// Add/Sub gradients need only the operands' shapes and layouts (no values kept for backward).
void add_sub_backward(BinaryOp op, const Shape& a, Layout la, const Shape& b, Layout lb, const Tensor& gy, Tensor* ga,
                      Tensor* gb);
// Sums g (shape `from`, already plain or same layout as `like`) down to `to` (numpy rules).
Tensor reduce_to_shape(const Tensor& g, const Shape& to);

}  // namespace hpcnn::ops
