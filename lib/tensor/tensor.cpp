#include "tensor/tensor.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace hpcnn {

// ---- dtypes and devices -----------------------------------------------------------------------
size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
    case DType::i32:
      return 4;
  }
  return 1;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
    case DType::i32:
      return "i32";
  }
  return "?";
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

namespace {

void* cpu_allocate(size_t bytes, int) {
  void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
  if (!p) throw std::bad_alloc();
  return p;
}
void cpu_release(void* p, int) noexcept { std::free(p); }
void cpu_copy(void* dst, Device to, const void* src, Device from, size_t bytes) {
  if (!to.is_cpu() || !from.is_cpu()) throw_error(ErrorKind::device, "the CPU's memory table copies between host buffers only");
  std::memcpy(dst, src, bytes);
}
const DeviceMemory kCpuMemory{cpu_allocate, cpu_release, cpu_copy};

// Read on every allocation: atomics, no lock.
std::atomic<const DeviceMemory*> g_memory[2] = {&kCpuMemory, nullptr};

}  // namespace

void register_device_memory(Device::Kind kind, const DeviceMemory* memory) { g_memory[static_cast<int>(kind)].store(memory); }

bool has_device_memory(Device::Kind kind) { return g_memory[static_cast<int>(kind)].load() != nullptr; }

const DeviceMemory& device_memory(Device::Kind kind) {
  const DeviceMemory* m = g_memory[static_cast<int>(kind)].load();
  if (!m)
    throw_error(ErrorKind::device, std::string("this build has no ") + Device{kind, 0}.str().substr(0, 4) +
                                       " backend (no memory table registered for the device)");
  return *m;
}

// ---- shapes ------------------------------------------------------------------------------------
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

// ---- Tensor --------------------------------------------------------------------------------------
Tensor::Tensor(Shape shape, Layout layout, DType dtype, Device device)
    : shape_(std::move(shape)), numel_(shape_numel(shape_)), layout_(layout), dtype_(dtype), device_(device) {
  if (layout_ == Layout::nhwc && shape_.size() != 4) layout_ = Layout::plain;
  const DeviceMemory& mem = device_memory(device_.kind);
  const int index = device_.index;
  buf_ = std::shared_ptr<void>(mem.allocate(static_cast<size_t>(numel_) * dtype_size(dtype_), index),
                               [release = mem.release, index](void* p) { release(p, index); });
}

void require_host(const Tensor& t, const char* what) {
  if (t.defined() && !t.device().is_cpu())
    throw_error(ErrorKind::device, std::string(what) + " runs on the CPU; the tensor is on " + t.device().str());
}

void Tensor::check_dtype(DType want) const {
  if (dtype_ != want)
    throw_error(ErrorKind::usage, std::string("a ") + dtype_name(dtype_) + " tensor read as " + dtype_name(want));
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
    throw_error(ErrorKind::bad_input,
                "tensor of shape " + shape_to_string(t.shape()) + " given " + std::to_string(values.size()) + " values");
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  Tensor t(shape_, layout_, dtype_, device_);
  device_memory(device_.kind).copy(t.raw(), device_, raw(), device_, bytes());
  return t;
}

Tensor Tensor::to(const Device& device) const {
  if (!defined() || device == device_) return *this;
  Tensor t(shape_, layout_, dtype_, device);
  // The non-CPU side's table knows both directions (host <-> device, device <-> device).
  const Device::Kind kind = device.is_cpu() ? device_.kind : device.kind;
  device_memory(kind).copy(t.raw(), device, raw(), device_, bytes());
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

Tensor Tensor::slice(int64_t offset, int64_t count) const {
  if (layout_ != Layout::plain) throw_error(ErrorKind::unsupported, "slice of an nhwc tensor");
  if (offset < 0 || count < 0 || offset > numel_ - count)
    throw_error(ErrorKind::usage, "slice [" + std::to_string(offset) + ", +" + std::to_string(count) + ") of a tensor of " +
                                      std::to_string(numel_) + " elements");
  Tensor t = *this;
  t.shape_ = {count};
  t.numel_ = count;
  t.offset_ = offset_ + offset;
  return t;
}

void copy_into(const Tensor& src, Tensor& dst) {
  if (src.numel() != dst.numel() || src.dtype() != dst.dtype())
    throw_error(ErrorKind::usage, std::string("copy of ") + std::to_string(src.numel()) + " " + dtype_name(src.dtype()) +
                                      " elements into " + std::to_string(dst.numel()) + " " + dtype_name(dst.dtype()));
  if (src.numel() == 0) return;
  const Device::Kind kind = src.device().is_cpu() ? dst.device().kind : src.device().kind;
  device_memory(kind).copy(dst.raw(), dst.device(), src.raw(), src.device(), src.bytes());
}

void Tensor::fill(float value) {
  require_host(*this, "Tensor::fill");
  check_dtype(DType::f32);
  std::fill(data(), data() + numel_, value);
}

Tensor to_layout(const Tensor& t, Layout layout) {
  if (t.rank() != 4 || t.layout() == layout) return t;
  require_host(t, "to_layout");
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
