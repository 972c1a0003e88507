// The op contracts' functions: each runs the kernel of its first tensor operand's device with
// that device's execution context (ops/kernels.h). Also the registry and the contexts.
#include <array>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>

#include "core/error.h"
#include "ops/kernels.h"

namespace hpcnn::ops {

// ---- registry and contexts ---------------------------------------------------------------------
namespace {
std::array<std::atomic<const Kernels*>, 2> g_tables{};

const Kernels& table_of(Device::Kind kind) {
  if (kind == Device::Kind::cpu) return cpu_kernels();
  const Kernels* t = g_tables[static_cast<size_t>(kind)].load();
  if (!t)
    throw_error(ErrorKind::device, "this build has no kernels for " + Device{kind, 0}.str() + " (no CUDA backend registered)");
  return *t;
}
}  // namespace

void register_kernels(Device::Kind kind, const Kernels* table) {
  if (kind == Device::Kind::cpu) throw_error(ErrorKind::usage, "the CPU's kernels are the reference and cannot be replaced");
  g_tables[static_cast<size_t>(kind)].store(table);
}

const Kernels& kernels(const Device& device) { return table_of(device.kind); }

std::vector<Device::Kind> registered_device_kinds() {
  std::vector<Device::Kind> kinds{Device::Kind::cpu};
  if (g_tables[static_cast<size_t>(Device::Kind::cuda)].load()) kinds.push_back(Device::Kind::cuda);
  return kinds;
}

ExecutionContext& execution_context(const Device& device) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, std::unique_ptr<ExecutionContext>> contexts;
  table_of(device.kind);  // a device kind without kernels has no context either
  std::lock_guard<std::mutex> lock(mutex);
  auto& c = contexts[{static_cast<int>(device.kind), device.index}];
  if (!c) {
    c = std::make_unique<ExecutionContext>();
    c->device = device;
  }
  return *c;
}

Tensor ExecutionContext::workspace(size_t bytes) {
  if (bytes > workspace_limit)
    throw_error(ErrorKind::device, "a kernel asks for " + std::to_string(bytes) + " bytes of workspace on " + device.str() +
                                       ", over the limit of " + std::to_string(workspace_limit));
  if (!workspace_.defined() || workspace_.bytes() < bytes)
    workspace_ = Tensor({static_cast<int64_t>(bytes)}, Layout::plain, DType::u8, device);
  return workspace_;
}

// ---- the contracts -------------------------------------------------------------------------------
namespace {
// The device of an op: its first defined tensor operand's.
ExecutionContext& ctx_of(const Tensor& t) { return execution_context(t.defined() ? t.device() : Device::cpu()); }
const Kernels& k_of(const Tensor& t) { return kernels(t.defined() ? t.device() : Device::cpu()); }
}  // namespace

Conv2d::Conv2d(Conv2dParams p) : p_(std::move(p)) {}
Conv2d::~Conv2d() = default;
Conv2d::Conv2d(Conv2d&&) noexcept = default;
Conv2d& Conv2d::operator=(Conv2d&&) noexcept = default;

Tensor Conv2d::forward(const Tensor& x, const Tensor& w, const Tensor& b, bool training) {
  if (!kernel_ || device_ != x.device()) {
    kernel_ = k_of(x).make_conv2d(p_);
    device_ = x.device();
  }
  return kernel_->forward(ctx_of(x), x, w, b, training);
}

void Conv2d::backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor* gx, Tensor* gw, Tensor* gb) {
  if (!kernel_) throw_error(ErrorKind::usage, "Conv backward before forward");
  kernel_->backward(ctx_of(x), x, w, gy, gx, gw, gb);
}

Conv3d::Conv3d(Conv3dParams p) : p_(std::move(p)) {}
Conv3d::~Conv3d() = default;
Conv3d::Conv3d(Conv3d&&) noexcept = default;
Conv3d& Conv3d::operator=(Conv3d&&) noexcept = default;

Tensor Conv3d::forward(const Tensor& x, const Tensor& w, const Tensor& b, bool training) {
  if (!kernel_ || device_ != x.device()) {
    kernel_ = k_of(x).make_conv3d(p_);
    device_ = x.device();
  }
  return kernel_->forward(ctx_of(x), x, w, b, training);
}

void Conv3d::backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor* gx, Tensor* gw, Tensor* gb) {
  if (!kernel_) throw_error(ErrorKind::usage, "Conv backward before forward");
  kernel_->backward(ctx_of(x), x, w, gy, gx, gw, gb);
}

Tensor batchnorm_inference(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& mean, const Tensor& var,
                           float epsilon) {
  return k_of(x).batchnorm_inference(ctx_of(x), x, scale, bias, mean, var, epsilon);
}
Tensor batchnorm_training(const Tensor& x, const Tensor& scale, const Tensor& bias, float epsilon, BatchNormStats& stats) {
  return k_of(x).batchnorm_training(ctx_of(x), x, scale, bias, epsilon, stats);
}
void batchnorm_backward(const Tensor& x, const Tensor& scale, const BatchNormStats& stats, const Tensor& gy, Tensor* gx,
                        Tensor* gscale, Tensor* gbias) {
  k_of(x).batchnorm_backward(ctx_of(x), x, scale, stats, gy, gx, gscale, gbias);
}

Tensor activation_forward(const Tensor& x, const ActivationParams& p) { return k_of(x).activation_forward(ctx_of(x), x, p); }
Tensor activation_backward(const Tensor& saved, const Tensor& gy, const ActivationParams& p) {
  return k_of(gy).activation_backward(ctx_of(gy), saved, gy, p);
}
Tensor dropout_forward(const Tensor& x, float ratio, std::mt19937_64& rng, std::vector<uint8_t>& mask) {
  return k_of(x).dropout_forward(ctx_of(x), x, ratio, rng, mask);
}
Tensor dropout_backward(const Tensor& gy, float ratio, const std::vector<uint8_t>& mask, Layout x_layout) {
  return k_of(gy).dropout_backward(ctx_of(gy), gy, ratio, mask, x_layout);
}

Tensor sparse_fcl_forward(const Tensor& x, const Tensor& A, const Tensor& a, const Tensor& B, const Tensor& b,
                          SparseFclSaved* saved) {
  return k_of(x).sparse_fcl_forward(ctx_of(x), x, A, a, B, b, saved);
}
void sparse_fcl_backward(const Tensor& x, const Tensor& A, const Tensor& B, const SparseFclSaved& saved, const Tensor& gy,
                         Tensor* gx, Tensor* gA, Tensor* ga, Tensor* gB, Tensor* gb) {
  k_of(x).sparse_fcl_backward(ctx_of(x), x, A, B, saved, gy, gx, gA, ga, gB, gb);
}
Tensor gemm_forward(const Tensor& A, const Tensor& B, const Tensor& C, const GemmParams& p) {
  return k_of(A).gemm_forward(ctx_of(A), A, B, C, p);
}
void gemm_backward(const Tensor& A, const Tensor& B, const Tensor& C, const GemmParams& p, const Tensor& gy, Tensor* gA,
                   Tensor* gB, Tensor* gC) {
  k_of(gy).gemm_backward(ctx_of(gy), A, B, C, p, gy, gA, gB, gC);
}
Tensor matmul_forward(const Tensor& A, const Tensor& B) { return k_of(A).matmul_forward(ctx_of(A), A, B); }
void matmul_backward(const Tensor& A, const Tensor& B, const Tensor& gy, Tensor* gA, Tensor* gB) {
  k_of(gy).matmul_backward(ctx_of(gy), A, B, gy, gA, gB);
}

Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b) { return k_of(a).binary_forward(ctx_of(a), op, a, b); }
void binary_backward(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& gy, Tensor* ga, Tensor* gb) {
  k_of(gy).binary_backward(ctx_of(gy), op, a, b, gy, ga, gb);
}
void add_sub_backward(BinaryOp op, const Shape& a, Layout la, const Shape& b, Layout lb, const Tensor& gy, Tensor* ga,
                      Tensor* gb) {
  k_of(gy).add_sub_backward(ctx_of(gy), op, a, la, b, lb, gy, ga, gb);
}
Tensor reduce_to_shape(const Tensor& g, const Shape& to) { return k_of(g).reduce_to_shape(ctx_of(g), g, to); }

Tensor maxpool_forward(const Tensor& x, const Pool2dParams& p, MaxPoolSaved* saved) {
  return k_of(x).maxpool_forward(ctx_of(x), x, p, saved);
}
Tensor maxpool_backward(const Shape& x_shape, const MaxPoolSaved& saved, const Tensor& gy) {
  return k_of(gy).maxpool_backward(ctx_of(gy), x_shape, saved, gy);
}
Tensor avgpool_forward(const Tensor& x, const Pool2dParams& p) { return k_of(x).avgpool_forward(ctx_of(x), x, p); }
Tensor avgpool_backward(const Shape& x_shape, const Pool2dParams& p, const Tensor& gy) {
  return k_of(gy).avgpool_backward(ctx_of(gy), x_shape, p, gy);
}
Tensor maxpool3d_forward(const Tensor& x, const Pool3dParams& p, MaxPoolSaved* saved) {
  return k_of(x).maxpool3d_forward(ctx_of(x), x, p, saved);
}
Tensor maxpool3d_backward(const Shape& x_shape, const MaxPoolSaved& saved, const Tensor& gy) {
  return k_of(gy).maxpool3d_backward(ctx_of(gy), x_shape, saved, gy);
}
Tensor avgpool3d_forward(const Tensor& x, const Pool3dParams& p) { return k_of(x).avgpool3d_forward(ctx_of(x), x, p); }
Tensor avgpool3d_backward(const Shape& x_shape, const Pool3dParams& p, const Tensor& gy) {
  return k_of(gy).avgpool3d_backward(ctx_of(gy), x_shape, p, gy);
}
Tensor global_avgpool_forward(const Tensor& x) { return k_of(x).global_avgpool_forward(ctx_of(x), x); }
Tensor global_avgpool_backward(const Tensor& x_like, const Tensor& gy) {
  return k_of(gy).global_avgpool_backward(ctx_of(gy), x_like, gy);
}

Tensor concat_forward(const std::vector<Tensor>& xs, int64_t axis) {
  const Tensor& first = xs.empty() ? Tensor() : xs.front();
  return k_of(first).concat_forward(ctx_of(first), xs, axis);
}
std::vector<Tensor> concat_backward(const std::vector<Shape>& shapes, int64_t axis, const Tensor& gy) {
  return k_of(gy).concat_backward(ctx_of(gy), shapes, axis, gy);
}
Tensor softmax_forward(const Tensor& x, int64_t axis, bool legacy_2d) {
  return k_of(x).softmax_forward(ctx_of(x), x, axis, legacy_2d);
}
Tensor softmax_backward(const Tensor& y, const Tensor& gy, int64_t axis, bool legacy_2d) {
  return k_of(gy).softmax_backward(ctx_of(gy), y, gy, axis, legacy_2d);
}
Tensor transpose_forward(const Tensor& x, const std::vector<int64_t>& perm) {
  return k_of(x).transpose_forward(ctx_of(x), x, perm);
}
Tensor pad_forward(const Tensor& x, const std::vector<int64_t>& pads, float value) {
  return k_of(x).pad_forward(ctx_of(x), x, pads, value);
}
Tensor pad_backward(const Shape& x_shape, const std::vector<int64_t>& pads, const Tensor& gy) {
  return k_of(gy).pad_backward(ctx_of(gy), x_shape, pads, gy);
}

LossResult softmax_cross_entropy(const Tensor& logits, std::span<const int32_t> labels, float label_smoothing, Tensor* grad) {
  return k_of(logits).softmax_cross_entropy(ctx_of(logits), logits, labels, label_smoothing, grad);
}

void gather(const Tensor& src, const Tensor& positions, Tensor& dst) { k_of(src).gather(ctx_of(src), src, positions, dst); }
void scatter(const Tensor& src, const Tensor& positions, Tensor& dst) { k_of(src).scatter(ctx_of(src), src, positions, dst); }
void scale(Tensor& x, float factor) { k_of(x).scale(ctx_of(x), x, factor); }
void sgd_update(Tensor& w, const Tensor& g, Tensor& v, const SgdParams& p) { k_of(w).sgd_update(ctx_of(w), w, g, v, p); }
void lars_update(Tensor& w, const Tensor& g, Tensor& v, const SgdParams& p, float trust_coefficient) {
  k_of(w).lars_update(ctx_of(w), w, g, v, p, trust_coefficient);
}

}  // namespace hpcnn::ops

namespace hpcnn::ops {

BatchNormStats BatchNormStats::frozen(const Tensor& mean, const Tensor& var, float epsilon) {
  BatchNormStats st;
  const Tensor m = mean.to(Device::cpu()), v = var.to(Device::cpu());
  Tensor invstd({v.numel()});
  for (int64_t c = 0; c < v.numel(); ++c) invstd.data()[c] = 1.0f / std::sqrt(v.data()[c] + epsilon);
  st.mean = mean;
  st.var = var;
  st.invstd = invstd.to(mean.device());
  st.is_frozen = true;
  return st;
}

}  // namespace hpcnn::ops
