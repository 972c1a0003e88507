#include "tensor/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace hpcnn {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw_error(ErrorKind::bad_input, "negative dimension in shape " + shape_to_string(shape));
    if (d != 0 && n > INT64_MAX / d) throw_error(ErrorKind::bad_input, "shape " + shape_to_string(shape) + " overflows");
    n *= d;
  }
  return n;
}

std::string shape_to_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {
std::shared_ptr<float[]> allocate(int64_t n) {
  size_t bytes = std::max<size_t>(64, (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  return std::shared_ptr<float[]>(static_cast<float*>(p), [](float* q) { std::free(q); });
}
}  // namespace

Tensor::Tensor(Shape shape, Layout layout) : shape_(std::move(shape)), numel_(shape_numel(shape_)), layout_(layout) {
  if (layout_ == Layout::nhwc && shape_.size() != 4) layout_ = Layout::plain;
  buf_ = allocate(numel_);
}

Tensor Tensor::zeros(Shape shape, Layout layout) { return full(std::move(shape), 0.0f, layout); }

Tensor Tensor::full(Shape shape, float value, Layout layout) {
  Tensor t(std::move(shape), layout);
  t.fill(value);
  return t;
}

Tensor Tensor::from_values(Shape shape, const std::vector<float>& values) {
  Tensor t(std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw_error(ErrorKind::bad_input, "tensor of shape " + shape_to_string(t.shape()) + " given " +
                                          std::to_string(values.size()) + " values");
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  Tensor t(shape_, layout_);
  std::memcpy(t.data(), data(), bytes());
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  if (layout_ != Layout::plain) throw_error(ErrorKind::unsupported, "reshape of an nhwc tensor");
  if (shape_numel(shape) != numel_)
    throw_error(ErrorKind::bad_input, "cannot reshape " + shape_to_string(shape_) + " to " + shape_to_string(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

void Tensor::fill(float value) { std::fill(data(), data() + numel_, value); }

Tensor to_layout(const Tensor& t, Layout layout) {
  if (t.rank() != 4 || t.layout() == layout) return t;
  const int64_t N = t.dim(0), C = t.dim(1), HW = t.dim(2) * t.dim(3);
  Tensor out(t.shape(), layout);
  const float* s = t.data();
  float* d = out.data();
  if (layout == Layout::nhwc) {  // plain NCHW -> NHWC
#pragma omp parallel for collapse(2) if (t.numel() > 32768)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < HW; ++p)
        for (int64_t c = 0; c < C; ++c) d[(n * HW + p) * C + c] = s[(n * C + c) * HW + p];
  } else {  // NHWC -> plain NCHW
#pragma omp parallel for collapse(2) if (t.numel() > 32768)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t p = 0; p < HW; ++p) d[(n * C + c) * HW + p] = s[(n * HW + p) * C + c];
  }
  return out;
}

}  // namespace hpcnn
