// hpcnn tensor: where a tensor's values live (Device), what they are (DType), and the memory
// of each device kind behind one small table (allocation, release, copies), so that a Tensor
// can live on a GPU without the tensor module knowing CUDA. The CPU's memory is built in; the
// CUDA backend registers its own (cudaMalloc, cudaMemcpy) at start-up. A device kind that no
// backend registered is ErrorKind::device ("this build has no cuda backend").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hpcnn {

// Element types. The kernels of lib/ops run on f32; i64 holds indices, i32 the sparse positions of
// a pruned model's kept weights (offsets within one tensor: 4 bytes a kept weight), u8 raw pixels
// or masks.
enum class DType : uint8_t { f32, i64, u8, i32 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "f32", "i64", "u8", "i32"

struct Device {
  enum class Kind : uint8_t { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;  // which GPU (cuda)

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {Kind::cuda, index}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  std::string str() const;  // "cpu", "cuda:1"
  bool operator==(const Device&) const = default;
};

// The memory of one device kind. Pointers returned by allocate are 64-byte aligned.
struct DeviceMemory {
  void* (*allocate)(size_t bytes, int index);  // std::bad_alloc or ErrorKind::device on failure
  void (*release)(void* p, int index) noexcept;
  // Copies `bytes` from `src` (on `from`) to `dst` (on `to`); one of them is this kind's device.
  void (*copy)(void* dst, Device to, const void* src, Device from, size_t bytes);
};

// Installs the memory table of a device kind (the CUDA backend at start-up; tests).
void register_device_memory(Device::Kind kind, const DeviceMemory* memory);
// The table of `kind`; ErrorKind::device when no backend registered one.
const DeviceMemory& device_memory(Device::Kind kind);
bool has_device_memory(Device::Kind kind);

}  // namespace hpcnn
