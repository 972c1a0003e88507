// hpcnn tensor: a dense fp32 tensor on the host (shape, layout, 64-byte aligned storage).
//
// Logical shapes are ONNX's: NCHW for images and activations of 2-D convolutions. Storage is
// row-major in the logical dim order (Layout::plain) or, for 4-D tensors only, channels-last
// (Layout::nhwc: memory order N, H, W, C), the layout oneDNN's convolutions run fastest in on
// x86. The training engine keeps 4-D activations in nhwc inside a graph and converts to plain
// only at the edges (graph inputs/outputs and operators that need logical order, e.g. Flatten).
//
// Tensors share their storage on copy (like a shared_ptr); clone() copies the values.
// Errors: ErrorKind::bad_input for negative dims or sizes that overflow int64.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hpcnn {

using Shape = std::vector<int64_t>;

enum class Layout : uint8_t {
  plain,  // row-major in logical dim order (NCHW for 4-D)
  nhwc,   // 4-D only: memory order N, H, W, C
};

int64_t shape_numel(const Shape& shape);
std::string shape_to_string(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Uninitialised storage for `shape` (fp32, 64-byte aligned).
  explicit Tensor(Shape shape, Layout layout = Layout::plain);
  static Tensor zeros(Shape shape, Layout layout = Layout::plain);
  static Tensor full(Shape shape, float value, Layout layout = Layout::plain);
  static Tensor from_values(Shape shape, const std::vector<float>& values);  // plain layout

  bool defined() const { return static_cast<bool>(buf_); }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i < 0 ? i + rank() : i)); }
  int64_t numel() const { return numel_; }
  size_t bytes() const { return static_cast<size_t>(numel_) * sizeof(float); }
  Layout layout() const { return layout_; }
  float* data() { return buf_.get(); }
  const float* data() const { return buf_.get(); }

  Tensor clone() const;
  // Same storage with another shape of equal numel (plain layout only).
  Tensor reshaped(Shape shape) const;
  void fill(float value);
  void zero() { fill(0.0f); }

 private:
  Shape shape_;
  int64_t numel_ = 0;
  Layout layout_ = Layout::plain;
  std::shared_ptr<float[]> buf_;
};

// The tensor in `layout` (a copy when it differs; the same tensor otherwise). Only 4-D tensors
// can be nhwc; for rank != 4 both layouts are the same and the tensor is returned unchanged.
Tensor to_layout(const Tensor& t, Layout layout);

}  // namespace hpcnn
