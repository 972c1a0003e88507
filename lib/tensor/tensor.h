// hpcnn tensor: a dense tensor (shape, dtype, device, layout) with 64-byte aligned storage.
//
// Logical shapes are ONNX's: NCHW for images and activations of 2-D convolutions. Storage is
// row-major in the logical dim order (Layout::plain) or, for 4-D tensors only, channels-last
// (Layout::nhwc: memory order N, H, W, C), the layout oneDNN's convolutions run fastest in on
// x86. The training engine keeps 4-D activations in nhwc inside a graph and converts to plain
// only at the edges (graph inputs/outputs and operators that need logical order, e.g. Flatten).
//
// dtype (tensor/device.h): f32 by default; data() is the f32 view, data_as<T>() any other.
// device: where the values live (the CPU by default; data() is then a host pointer, else a
// device pointer that host code must not dereference). Host-only helpers (fill, from_values,
// to_layout, the element loops of lib/ops/cpu) refuse other devices with ErrorKind::device;
// to(device) copies.
//
// Tensors share their storage on copy (like a shared_ptr); clone() copies the values, slice()
// views a flat range of them. Errors: ErrorKind::bad_input for negative dims or sizes that
// overflow int64.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tensor/device.h"

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
  // Uninitialised storage for `shape` (64-byte aligned) on `device`.
  explicit Tensor(Shape shape, Layout layout = Layout::plain, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(Shape shape, Layout layout = Layout::plain);
  static Tensor full(Shape shape, float value, Layout layout = Layout::plain);
  static Tensor from_values(Shape shape, const std::vector<float>& values);  // plain layout

  bool defined() const { return static_cast<bool>(buf_); }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i < 0 ? i + rank() : i)); }
  int64_t numel() const { return numel_; }
  size_t bytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  Layout layout() const { return layout_; }
  DType dtype() const { return dtype_; }
  const Device& device() const { return device_; }
  // The f32 elements (host or device pointer, by device()).
  float* data() { return static_cast<float*>(raw()); }
  const float* data() const { return static_cast<const float*>(raw()); }
  // The elements as T, which must match dtype() (ErrorKind::usage otherwise).
  template <class T>
  T* data_as() {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(raw());
  }
  template <class T>
  const T* data_as() const {
    check_dtype(dtype_of<T>());
    return static_cast<const T*>(raw());
  }

  Tensor clone() const;
  // The same values on `device` (this tensor itself when it is already there).
  Tensor to(const Device& device) const;
  // Same storage with another shape of equal numel (plain layout only).
  Tensor reshaped(Shape shape) const;
  // A 1-D view of `count` elements from flat position `offset`, sharing storage (plain only).
  Tensor slice(int64_t offset, int64_t count) const;
  void fill(float value);  // host f32 only
  void zero() { fill(0.0f); }

 private:
  template <class T>
  static constexpr DType dtype_of() {
    if constexpr (std::is_same_v<std::remove_const_t<T>, float>)
      return DType::f32;
    else if constexpr (std::is_same_v<std::remove_const_t<T>, int64_t>)
      return DType::i64;
    else if constexpr (std::is_same_v<std::remove_const_t<T>, int32_t>)
      return DType::i32;
    else
      return DType::u8;
  }
  friend void copy_into(const Tensor& src, Tensor& dst);
  void check_dtype(DType want) const;
  void* raw() const { return static_cast<char*>(buf_.get()) + offset_ * static_cast<int64_t>(dtype_size(dtype_)); }

  Shape shape_;
  int64_t numel_ = 0;
  int64_t offset_ = 0;  // elements into buf_ (slices)
  Layout layout_ = Layout::plain;
  DType dtype_ = DType::f32;
  Device device_;
  std::shared_ptr<void> buf_;
};

// Copies src's elements into dst (same numel and dtype; any devices; layouts are not converted).
// ErrorKind::usage when they differ in size or dtype.
void copy_into(const Tensor& src, Tensor& dst);

// Throws ErrorKind::device when `t` is not on the CPU: `what` names the host-only operation.
void require_host(const Tensor& t, const char* what);

// The tensor in `layout` (a copy when it differs; the same tensor otherwise). Only 4-D tensors
// can be nhwc; for rank != 4 both layouts are the same and the tensor is returned unchanged.
// Host tensors only.
Tensor to_layout(const Tensor& t, Layout layout);

}  // namespace hpcnn
