// The CPU's table of kernels (ops/kernels.h): the cpu:: twins, adapted to the table's
// signatures (the CPU needs nothing from its execution context).
#include "ops/cpu/kernels.h"

namespace hpcnn::ops {

namespace {

using Ctx = ExecutionContext;

Kernels make_cpu_kernels() {
  Kernels k;
  k.name = "cpu";
  k.make_conv2d = cpu::make_conv2d;
  k.make_conv3d = cpu::make_conv3d;
  k.batchnorm_inference = [](Ctx&, const Tensor& x, const Tensor& s, const Tensor& b, const Tensor& m, const Tensor& v, float e) {
    return cpu::batchnorm_inference(x, s, b, m, v, e);
  };
  k.batchnorm_training = [](Ctx&, const Tensor& x, const Tensor& s, const Tensor& b, float e, BatchNormStats& st) {
    return cpu::batchnorm_training(x, s, b, e, st);
  };
  k.batchnorm_backward = [](Ctx&, const Tensor& x, const Tensor& s, const BatchNormStats& st, const Tensor& gy, Tensor* gx,
                            Tensor* gs, Tensor* gb) { cpu::batchnorm_backward(x, s, st, gy, gx, gs, gb); };
  k.sparse_fcl_forward = [](Ctx&, const Tensor& x, const Tensor& A, const Tensor& a, const Tensor& B, const Tensor& b,
                            SparseFclSaved* s) { return cpu::sparse_fcl_forward(x, A, a, B, b, s); };
  k.sparse_fcl_backward = [](Ctx&, const Tensor& x, const Tensor& A, const Tensor& B, const SparseFclSaved& s, const Tensor& gy,
                             Tensor* gx, Tensor* gA, Tensor* ga, Tensor* gB,
                             Tensor* gb) { cpu::sparse_fcl_backward(x, A, B, s, gy, gx, gA, ga, gB, gb); };
  k.activation_forward = [](Ctx&, const Tensor& x, const ActivationParams& p) { return cpu::activation_forward(x, p); };
  k.activation_backward = [](Ctx&, const Tensor& s, const Tensor& gy, const ActivationParams& p) {
    return cpu::activation_backward(s, gy, p);
  };
  k.dropout_forward = [](Ctx&, const Tensor& x, float r, std::mt19937_64& rng, std::vector<uint8_t>& m) {
    return cpu::dropout_forward(x, r, rng, m);
  };
  k.dropout_backward = [](Ctx&, const Tensor& gy, float r, const std::vector<uint8_t>& m, Layout l) {
    return cpu::dropout_backward(gy, r, m, l);
  };
  k.gemm_forward = [](Ctx&, const Tensor& A, const Tensor& B, const Tensor& C, const GemmParams& p) {
    return cpu::gemm_forward(A, B, C, p);
  };
  k.gemm_backward = [](Ctx&, const Tensor& A, const Tensor& B, const Tensor& C, const GemmParams& p, const Tensor& gy, Tensor* gA,
                       Tensor* gB, Tensor* gC) { cpu::gemm_backward(A, B, C, p, gy, gA, gB, gC); };
  k.matmul_forward = [](Ctx&, const Tensor& A, const Tensor& B) { return cpu::matmul_forward(A, B); };
  k.matmul_backward = [](Ctx&, const Tensor& A, const Tensor& B, const Tensor& gy, Tensor* gA, Tensor* gB) {
    cpu::matmul_backward(A, B, gy, gA, gB);
  };
  k.binary_forward = [](Ctx&, BinaryOp op, const Tensor& a, const Tensor& b) { return cpu::binary_forward(op, a, b); };
  k.binary_backward = [](Ctx&, BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& gy, Tensor* ga, Tensor* gb) {
    cpu::binary_backward(op, a, b, gy, ga, gb);
  };
  k.add_sub_backward = [](Ctx&, BinaryOp op, const Shape& a, Layout la, const Shape& b, Layout lb, const Tensor& gy, Tensor* ga,
                          Tensor* gb) { cpu::add_sub_backward(op, a, la, b, lb, gy, ga, gb); };
  k.reduce_to_shape = [](Ctx&, const Tensor& g, const Shape& to) { return cpu::reduce_to_shape(g, to); };
  k.maxpool_forward = [](Ctx&, const Tensor& x, const Pool2dParams& p, MaxPoolSaved* s) { return cpu::maxpool_forward(x, p, s); };
  k.maxpool_backward = [](Ctx&, const Shape& xs, const MaxPoolSaved& s, const Tensor& gy) {
    return cpu::maxpool_backward(xs, s, gy);
  };
  k.avgpool_forward = [](Ctx&, const Tensor& x, const Pool2dParams& p) { return cpu::avgpool_forward(x, p); };
  k.avgpool_backward = [](Ctx&, const Shape& xs, const Pool2dParams& p, const Tensor& gy) {
    return cpu::avgpool_backward(xs, p, gy);
  };
  k.maxpool3d_forward = [](Ctx&, const Tensor& x, const Pool3dParams& p, MaxPoolSaved* s) {
    return cpu::maxpool3d_forward(x, p, s);
  };
  k.maxpool3d_backward = [](Ctx&, const Shape& xs, const MaxPoolSaved& s, const Tensor& gy) {
    return cpu::maxpool3d_backward(xs, s, gy);
  };
  k.avgpool3d_forward = [](Ctx&, const Tensor& x, const Pool3dParams& p) { return cpu::avgpool3d_forward(x, p); };
  k.avgpool3d_backward = [](Ctx&, const Shape& xs, const Pool3dParams& p, const Tensor& gy) {
    return cpu::avgpool3d_backward(xs, p, gy);
  };
  k.global_avgpool_forward = [](Ctx&, const Tensor& x) { return cpu::global_avgpool_forward(x); };
  k.global_avgpool_backward = [](Ctx&, const Tensor& x, const Tensor& gy) { return cpu::global_avgpool_backward(x, gy); };
  k.concat_forward = [](Ctx&, const std::vector<Tensor>& xs, int64_t axis) { return cpu::concat_forward(xs, axis); };
  k.concat_backward = [](Ctx&, const std::vector<Shape>& s, int64_t axis, const Tensor& gy) {
    return cpu::concat_backward(s, axis, gy);
  };
  k.softmax_forward = [](Ctx&, const Tensor& x, int64_t axis, bool legacy) { return cpu::softmax_forward(x, axis, legacy); };
  k.softmax_backward = [](Ctx&, const Tensor& y, const Tensor& gy, int64_t axis, bool legacy) {
    return cpu::softmax_backward(y, gy, axis, legacy);
  };
  k.transpose_forward = [](Ctx&, const Tensor& x, const std::vector<int64_t>& perm) { return cpu::transpose_forward(x, perm); };
  k.pad_forward = [](Ctx&, const Tensor& x, const std::vector<int64_t>& pads, float v) { return cpu::pad_forward(x, pads, v); };
  k.pad_backward = [](Ctx&, const Shape& xs, const std::vector<int64_t>& pads, const Tensor& gy) {
    return cpu::pad_backward(xs, pads, gy);
  };
  k.softmax_cross_entropy = [](Ctx&, const Tensor& z, std::span<const int32_t> labels, float e, Tensor* g) {
    return cpu::softmax_cross_entropy(z, labels, e, g);
  };
  k.gather = [](Ctx&, const Tensor& src, const Tensor& pos, Tensor& dst) { cpu::gather(src, pos, dst); };
  k.scatter = [](Ctx&, const Tensor& src, const Tensor& pos, Tensor& dst) { cpu::scatter(src, pos, dst); };
  k.scale = [](Ctx&, Tensor& x, float f) { cpu::scale(x, f); };
  k.sgd_update = [](Ctx&, Tensor& w, const Tensor& g, Tensor& v, const SgdParams& p) { cpu::sgd_update(w, g, v, p); };
  k.lars_update = [](Ctx&, Tensor& w, const Tensor& g, Tensor& v, const SgdParams& p, float t) {
    cpu::lars_update(w, g, v, p, t);
  };
  return k;
}

}  // namespace

const Kernels& cpu_kernels() {
  static const Kernels table = make_cpu_kernels();
  return table;
}

}  // namespace hpcnn::ops
