// hpcnn ops: the device seam. Every op contract (<op>.h) is implemented once per device and
// registered as one table of kernels; the contract's functions dispatch on the device of their
// first tensor operand and run the kernel with that device's execution context. The CPU twin
// (cpu/, oneDNN and OpenMP) is always registered and is the reference: tests/ops/
// test_device_ops.cpp runs every op of every registered device against it from one table of
// cases. A CUDA backend (cuDNN/cuBLAS and own kernels) registers its table, its memory
// (tensor/device.h) and its contexts at start-up.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "ops/batchnorm.h"
#include "ops/binary.h"
#include "ops/conv.h"
#include "ops/eltwise.h"
#include "ops/gemm.h"
#include "ops/loss.h"
#include "ops/pool.h"
#include "ops/shape_ops.h"
#include "ops/sparse_fcl.h"
#include "ops/update.h"
#include "tensor/tensor.h"

namespace hpcnn::ops {

// What a device's kernels run with: its stream, library handles and a reusable workspace
// (cuDNN's algorithms ask for scratch memory; the workspace grows up to `workspace_limit`
// bytes and is reused). On the CPU the stream and handles are null and the workspace host
// memory. One context per device in a process (not thread-safe: one training loop per process).
struct ExecutionContext {
  Device device;
  void* stream = nullptr;  // cudaStream_t on a GPU
  void* blas = nullptr;    // cublasHandle_t
  void* dnn = nullptr;     // cudnnHandle_t
  size_t workspace_limit = size_t{1} << 30;

  // At least `bytes` of scratch on `device` (ErrorKind::device beyond workspace_limit).
  Tensor workspace(size_t bytes);

 private:
  Tensor workspace_;
};

// The context of `device` (created on first use by the device's backend; ErrorKind::device
// for a device kind no backend registered).
ExecutionContext& execution_context(const Device& device);

// A convolution's kernels for one node (2-D or 3-D): they may keep state per input shape (oneDNN
// primitives, cuDNN algorithm choices).
class ConvKernel {
 public:
  virtual ~ConvKernel() = default;
  virtual Tensor forward(ExecutionContext& ctx, const Tensor& x, const Tensor& w, const Tensor& b, bool training) = 0;
  virtual void backward(ExecutionContext& ctx, const Tensor& x, const Tensor& w, const Tensor& gy, Tensor* gx, Tensor* gw,
                        Tensor* gb) = 0;
};

// One device's implementation of every op contract (the signatures of the contract functions,
// with the context first). Entries must all be set.
struct Kernels {
  const char* name = "";
  std::unique_ptr<ConvKernel> (*make_conv2d)(const Conv2dParams& p);
  std::unique_ptr<ConvKernel> (*make_conv3d)(const Conv3dParams& p);

  Tensor (*batchnorm_inference)(ExecutionContext&, const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& mean,
                                const Tensor& var, float epsilon);
  Tensor (*batchnorm_training)(ExecutionContext&, const Tensor& x, const Tensor& scale, const Tensor& bias, float epsilon,
                               BatchNormStats& stats);
  void (*batchnorm_backward)(ExecutionContext&, const Tensor& x, const Tensor& scale, const BatchNormStats& stats,
                             const Tensor& gy, Tensor* gx, Tensor* gscale, Tensor* gbias);

  Tensor (*activation_forward)(ExecutionContext&, const Tensor& x, const ActivationParams& p);
  Tensor (*activation_backward)(ExecutionContext&, const Tensor& saved, const Tensor& gy, const ActivationParams& p);
  Tensor (*dropout_forward)(ExecutionContext&, const Tensor& x, float ratio, std::mt19937_64& rng, std::vector<uint8_t>& mask);
  Tensor (*dropout_backward)(ExecutionContext&, const Tensor& gy, float ratio, const std::vector<uint8_t>& mask, Layout x_layout);

  Tensor (*sparse_fcl_forward)(ExecutionContext&, const Tensor& x, const Tensor& A, const Tensor& a, const Tensor& B,
                               const Tensor& b, SparseFclSaved* saved);
  void (*sparse_fcl_backward)(ExecutionContext&, const Tensor& x, const Tensor& A, const Tensor& B, const SparseFclSaved& saved,
                              const Tensor& gy, Tensor* gx, Tensor* gA, Tensor* ga, Tensor* gB, Tensor* gb);

  Tensor (*gemm_forward)(ExecutionContext&, const Tensor& A, const Tensor& B, const Tensor& C, const GemmParams& p);
  void (*gemm_backward)(ExecutionContext&, const Tensor& A, const Tensor& B, const Tensor& C, const GemmParams& p,
                        const Tensor& gy, Tensor* gA, Tensor* gB, Tensor* gC);
  Tensor (*matmul_forward)(ExecutionContext&, const Tensor& A, const Tensor& B);
  void (*matmul_backward)(ExecutionContext&, const Tensor& A, const Tensor& B, const Tensor& gy, Tensor* gA, Tensor* gB);

  Tensor (*binary_forward)(ExecutionContext&, BinaryOp op, const Tensor& a, const Tensor& b);
  void (*binary_backward)(ExecutionContext&, BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& gy, Tensor* ga,
                          Tensor* gb);
  void (*add_sub_backward)(ExecutionContext&, BinaryOp op, const Shape& a, Layout la, const Shape& b, Layout lb, const Tensor& gy,
                           Tensor* ga, Tensor* gb);
  Tensor (*reduce_to_shape)(ExecutionContext&, const Tensor& g, const Shape& to);

  Tensor (*maxpool_forward)(ExecutionContext&, const Tensor& x, const Pool2dParams& p, MaxPoolSaved* saved);
  Tensor (*maxpool_backward)(ExecutionContext&, const Shape& x_shape, const MaxPoolSaved& saved, const Tensor& gy);
  Tensor (*avgpool_forward)(ExecutionContext&, const Tensor& x, const Pool2dParams& p);
  Tensor (*avgpool_backward)(ExecutionContext&, const Shape& x_shape, const Pool2dParams& p, const Tensor& gy);
  Tensor (*maxpool3d_forward)(ExecutionContext&, const Tensor& x, const Pool3dParams& p, MaxPoolSaved* saved);
  Tensor (*maxpool3d_backward)(ExecutionContext&, const Shape& x_shape, const MaxPoolSaved& saved, const Tensor& gy);
  Tensor (*avgpool3d_forward)(ExecutionContext&, const Tensor& x, const Pool3dParams& p);
  Tensor (*avgpool3d_backward)(ExecutionContext&, const Shape& x_shape, const Pool3dParams& p, const Tensor& gy);
  Tensor (*global_avgpool_forward)(ExecutionContext&, const Tensor& x);
  Tensor (*global_avgpool_backward)(ExecutionContext&, const Tensor& x_like, const Tensor& gy);

  Tensor (*concat_forward)(ExecutionContext&, const std::vector<Tensor>& xs, int64_t axis);
  std::vector<Tensor> (*concat_backward)(ExecutionContext&, const std::vector<Shape>& shapes, int64_t axis, const Tensor& gy);
  Tensor (*softmax_forward)(ExecutionContext&, const Tensor& x, int64_t axis, bool legacy_2d);
  Tensor (*softmax_backward)(ExecutionContext&, const Tensor& y, const Tensor& gy, int64_t axis, bool legacy_2d);
  Tensor (*transpose_forward)(ExecutionContext&, const Tensor& x, const std::vector<int64_t>& perm);
  Tensor (*pad_forward)(ExecutionContext&, const Tensor& x, const std::vector<int64_t>& pads, float value);
  Tensor (*pad_backward)(ExecutionContext&, const Shape& x_shape, const std::vector<int64_t>& pads, const Tensor& gy);

  LossResult (*softmax_cross_entropy)(ExecutionContext&, const Tensor& logits, std::span<const int32_t> labels,
                                      float label_smoothing, Tensor* grad);

  void (*gather)(ExecutionContext&, const Tensor& src, const Tensor& positions, Tensor& dst);
  void (*scatter)(ExecutionContext&, const Tensor& src, const Tensor& positions, Tensor& dst);
  void (*scale)(ExecutionContext&, Tensor& x, float factor);
  void (*sgd_update)(ExecutionContext&, Tensor& w, const Tensor& g, Tensor& v, const SgdParams& p);
  void (*lars_update)(ExecutionContext&, Tensor& w, const Tensor& g, Tensor& v, const SgdParams& p, float trust);
};

// The kernels of `device` (ErrorKind::device when no backend registered that kind).
const Kernels& kernels(const Device& device);
// Installs a device kind's kernels (the CUDA backend at start-up; tests plant a faulty twin).
// nullptr removes them. The CPU's cannot be replaced.
void register_kernels(Device::Kind kind, const Kernels* table);
// The CPU twin, always available.
const Kernels& cpu_kernels();
// The device kinds with kernels, the CPU first.
std::vector<Device::Kind> registered_device_kinds();

}  // namespace hpcnn::ops
