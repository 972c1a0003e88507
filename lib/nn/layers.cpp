// Binding of ONNX nodes to kernels: attribute parsing per opset (7 to 21), forward/backward
// glue. Kernels live in lib/ops; shape arithmetic on int64 values is done here on the host.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "core/error.h"
#include "nn/layer.h"
#include "nn/proto_tensor.h"
#include "nn/spatial.h"
#include "onnx/graph.h"
#include "onnx/tensor.h"
#include "ops/batchnorm.h"
#include "ops/binary.h"
#include "ops/conv.h"
#include "ops/eltwise.h"
#include "ops/gemm.h"
#include "ops/pool.h"
#include "ops/shape_ops.h"
#include "ops/sparse_fcl.h"

namespace hpcnn::nn::detail {

using onnxu::attr_float;
using onnxu::attr_int;
using onnxu::attr_ints;
using onnxu::attr_string;

void Layer::throw_unsupported_backward() const { throw_error(ErrorKind::unsupported, "this operator has no backward pass"); }

namespace {

[[noreturn]] void unsupported(const std::string& what) { throw_error(ErrorKind::unsupported, what); }

const Tensor& tensor_in(const std::vector<const Value*>& in, size_t i, const char* op) {
  if (i >= in.size() || !in[i] || !in[i]->defined())
    throw_error(ErrorKind::bad_input, std::string(op) + " input " + std::to_string(i) + " is missing");
  if (in[i]->is_int)
    throw_error(ErrorKind::unsupported,
                std::string(op) + " input " + std::to_string(i) + " is an integer tensor; the engine runs fp32 only");
  return in[i]->t;
}

Tensor optional_in(const std::vector<const Value*>& in, size_t i) {
  if (i >= in.size() || !in[i] || !in[i]->defined() || in[i]->is_int) return {};
  return in[i]->t;
}

// Checks that only `known` attributes are present.
void check_attributes(const onnx::NodeProto& node, std::initializer_list<const char*> known) {
  for (const auto& a : node.attribute()) {
    bool ok = false;
    for (const char* k : known) ok = ok || a.name() == k;
    if (!ok) unsupported("attribute '" + a.name() + "' of " + node.op_type() + " is not supported");
  }
}

// The number of spatial axes that a Conv/pooling node's attributes describe (0: none says).
// ErrorKind::unsupported when they disagree.
int spatial_rank(const onnx::NodeProto& node) {
  int nd = 0;
  for (const char* name : {"kernel_shape", "strides", "dilations", "pads"}) {
    const auto v = attr_ints(node, name);
    if (v.empty()) continue;
    const int n = static_cast<int>(std::string(name) == "pads" ? v.size() / 2 : v.size());
    if (std::string(name) == "pads" && v.size() % 2)
      unsupported(node.op_type() + " with " + std::to_string(v.size()) + " values in 'pads'");
    if (nd && n != nd)
      unsupported(node.op_type() + " attributes for different numbers of spatial dims (" + std::to_string(nd) + " and " +
                  std::to_string(n) + " in '" + name + "')");
    nd = n;
  }
  return nd;
}

// ErrorKind::unsupported naming the node's operator unless it has 2 or 3 spatial dims.
void check_spatial_rank(const onnx::NodeProto& node, int nd) {
  if (nd != 2 && nd != 3)
    unsupported(node.op_type() + " with " + std::to_string(nd) + " spatial dims: only 2-D and 3-D are supported");
}

// One value per spatial axis (`fallback` for each when the attribute is absent).
template <size_t N>
std::array<int64_t, N> spatial_attr(const onnx::NodeProto& node, const char* name, int64_t fallback) {
  std::array<int64_t, N> a;
  a.fill(fallback);
  const auto v = attr_ints(node, name);
  if (v.empty()) return a;
  if (v.size() != N)
    unsupported(node.op_type() + " with " + std::to_string(v.size()) + " spatial dims in '" + name + "' (expected " +
                std::to_string(N) + ")");
  std::copy(v.begin(), v.end(), a.begin());
  return a;
}

// Begins then ends, one each per spatial axis.
template <size_t N>
std::array<int64_t, 2 * N> pads_attr(const onnx::NodeProto& node) {
  std::array<int64_t, 2 * N> a{};
  const auto v = attr_ints(node, "pads");
  if (v.empty()) return a;
  if (v.size() != 2 * N)
    unsupported(node.op_type() + " with " + std::to_string(v.size() / 2) + " spatial dims in 'pads' (expected " +
                std::to_string(N) + ")");
  for (int64_t p : v)
    if (p < 0) unsupported(node.op_type() + " with negative pads");
  std::copy(v.begin(), v.end(), a.begin());
  return a;
}

std::string auto_pad_attr(const onnx::NodeProto& node) {
  std::string s = attr_string(node, "auto_pad", "NOTSET");
  if (s != "NOTSET" && s != "SAME_UPPER" && s != "SAME_LOWER" && s != "VALID") unsupported("auto_pad '" + s + "'");
  return s;
}

// The window attributes of a Conv or pooling node with N spatial dims into `p`: kernel_shape
// (`kernel_fallback` per axis when absent), strides, dilations, pads, auto_pad.
template <size_t N, class WindowParams>
void read_window(const onnx::NodeProto& node, int64_t kernel_fallback, WindowParams& p) {
  p.kernel = spatial_attr<N>(node, "kernel_shape", kernel_fallback);
  p.stride = spatial_attr<N>(node, "strides", 1);
  p.dilation = spatial_attr<N>(node, "dilations", 1);
  p.pads = pads_attr<N>(node);
  p.auto_pad = auto_pad_attr(node);
}

void need_outputs(const onnx::NodeProto& node, int max_used) {
  for (int i = max_used; i < node.output_size(); ++i)
    if (!node.output(i).empty())
      unsupported(node.op_type() + " output " + std::to_string(i) + " ('" + node.output(i) + "') is not supported");
}

// ------------------------------------------------------------------------------------------
// Conv with 2 spatial dims (4-D input: ops::Conv2d, nhwc inside) or 3 (5-D input: ops::Conv3d,
// NCDHW). The spatial rank comes from the attributes, else from a constant weight, else from the
// first input (a weight fed at run time); any other rank is ErrorKind::unsupported.
class ConvLayer : public Layer {
 public:
  ConvLayer(const onnx::NodeProto& node, const ConstantLookup& constant) {
    check_attributes(node, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
    need_outputs(node, 1);
    nd_ = spatial_rank(node);
    if (const Value* w = node.input_size() > 1 ? constant(1) : nullptr; w && !w->is_int && w->t.rank() >= 2) {
      if (nd_ && nd_ != w->t.rank() - 2)
        unsupported("Conv attributes for " + std::to_string(nd_) + " spatial dims with a weight of shape " +
                    shape_to_string(w->t.shape()));
      nd_ = w->t.rank() - 2;
    }
    if (nd_) check_spatial_rank(node, nd_);
    p2_.group = p3_.group = attr_int(node, "group", 1);
    if (nd_ != 3) read_window<2>(node, 0, p2_);
    if (nd_ != 2) read_window<3>(node, 0, p3_);
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext& ctx) override {
    const Tensor& x = tensor_in(in, 0, "Conv");
    const int nd = x.rank() - 2;
    if ((nd != 2 && nd != 3) || (nd_ && nd != nd_))
      unsupported("Conv of a " + std::to_string(x.rank()) + "-D input " + shape_to_string(x.shape()) +
                  (nd_ ? " with attributes for " + std::to_string(nd_) + " spatial dims" : std::string()) +
                  ": only 2-D (4-D input) and 3-D (5-D input) convolutions are supported");
    const bool training = ctx.mode != Mode::inference;
    if (nd == 2) {
      if (!conv2d_) conv2d_.emplace(p2_);
      out[0] = Value::of(conv2d_->forward(x, tensor_in(in, 1, "Conv"), optional_in(in, 2), training));
    } else {
      if (!conv3d_) conv3d_.emplace(p3_);
      out[0] = Value::of(conv3d_->forward(x, tensor_in(in, 1, "Conv"), optional_in(in, 2), training));
    }
    ran_3d_ = nd == 3;
  }
  void backward(const std::vector<const Value*>& in, const std::vector<const Value*>&, const Tensor& gy, std::vector<Tensor>& gin,
                const std::vector<bool>& need) override {
    const bool nb = need.size() > 2 && need[2] && in.size() > 2 && in[2];
    Tensor* gx = need[0] ? &gin[0] : nullptr;
    Tensor* gw = need[1] ? &gin[1] : nullptr;
    Tensor* gb = nb ? &gin[2] : nullptr;
    if (ran_3d_)
      conv3d_->backward(in[0]->t, in[1]->t, gy, gx, gw, gb);
    else
      conv2d_->backward(in[0]->t, in[1]->t, gy, gx, gw, gb);
  }
  bool keeps_input(int i) const override { return i <= 1; }

 private:
  int nd_ = 0;  // spatial dims the node declares (0: from its input)
  ops::Conv2dParams p2_;
  ops::Conv3dParams p3_;
  std::optional<ops::Conv2d> conv2d_;
  std::optional<ops::Conv3d> conv3d_;
  bool ran_3d_ = false;
};

// ------------------------------------------------------------------------------------------
class BatchNormLayer : public Layer {
 public:
  BatchNormLayer(const onnx::NodeProto& node, int64_t opset) {
    check_attributes(node, {"epsilon", "momentum", "spatial", "training_mode", "is_test"});
    eps_ = attr_float(node, "epsilon", 1e-5f);
    momentum_ = attr_float(node, "momentum", 0.9f);
    if (attr_int(node, "spatial", 1) != 1) unsupported("BatchNormalization with spatial = 0");
    if (attr_int(node, "is_test", 0) != 0) unsupported("BatchNormalization with is_test");
    training_attr_ = attr_int(node, "training_mode", 0) != 0;
    opset14_ = opset >= 14;
    outputs_ = 0;
    for (int i = 1; i < node.output_size(); ++i)
      if (!node.output(i).empty()) outputs_ = i;
    if (opset14_ && outputs_ > 0 && !training_attr_)
      throw_error(ErrorKind::bad_input, "BatchNormalization has running-statistics outputs but training_mode = 0");
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext& ctx) override {
    const Tensor& x = tensor_in(in, 0, "BatchNormalization");
    const Tensor& scale = tensor_in(in, 1, "BatchNormalization");
    const Tensor& bias = tensor_in(in, 2, "BatchNormalization");
    const Tensor& mean = tensor_in(in, 3, "BatchNormalization");
    const Tensor& var = tensor_in(in, 4, "BatchNormalization");
    const bool batch_stats = ctx.mode == Mode::training || training_attr_;
    if (!batch_stats) {
      out[0] = Value::of(ops::batchnorm_inference(x, scale, bias, mean, var, eps_));
      trained_ = ctx.mode == Mode::inference_grad;
      if (trained_) stats_ = ops::BatchNormStats::frozen(mean, var, eps_);  // backward through the running statistics
      fresh_moments_ = false;
      return;
    }
    out[0] = Value::of(ops::batchnorm_training(x, scale, bias, eps_, stats_));
    trained_ = true;
    // The batch moments, for the Model to update its running statistics (the buffers are the
    // Model's: the layer never writes them) or to collect them (nn/batchnorm_statistics.h).
    moments_ = ChannelMoments::from_sums(stats_.count, stats_.sum, stats_.sum_sq);
    fresh_moments_ = ctx.mode == Mode::training;
    if (outputs_ >= 1) {  // opset 14+ outputs: the running statistics after this batch
      const int64_t C = stats_.mean.numel();
      Tensor rm({C}), rv({C});
      for (int64_t c = 0; c < C; ++c) {
        rm.data()[c] = momentum_ * mean.data()[c] + (1 - momentum_) * stats_.mean.data()[c];
        rv.data()[c] = momentum_ * var.data()[c] + (1 - momentum_) * stats_.var.data()[c];
      }
      out[1] = Value::of(rm);
      if (outputs_ >= 2) out[2] = Value::of(rv);
    }
    if (outputs_ >= 3) out[3] = Value::of(stats_.mean.clone());
    if (outputs_ >= 4) out[4] = Value::of(stats_.var.clone());
  }
  void backward(const std::vector<const Value*>& in, const std::vector<const Value*>&, const Tensor& gy, std::vector<Tensor>& gin,
                const std::vector<bool>& need) override {
    if (!trained_) unsupported("BatchNormalization backward after an inference-mode forward");
    ops::batchnorm_backward(in[0]->t, in[1]->t, stats_, gy, need[0] ? &gin[0] : nullptr, need[1] ? &gin[1] : nullptr,
                            need[2] ? &gin[2] : nullptr);
  }
  bool keeps_input(int i) const override { return i <= 1; }
  const ChannelMoments* take_batch_moments() override {
    if (!fresh_moments_) return nullptr;
    fresh_moments_ = false;
    return &moments_;
  }
  float batchnorm_momentum() const override { return momentum_; }

 private:
  float eps_, momentum_;
  bool training_attr_, opset14_, trained_ = false, fresh_moments_ = false;
  int outputs_;
  ops::BatchNormStats stats_;
  ChannelMoments moments_;
};

// ------------------------------------------------------------------------------------------
class ActivationLayer : public Layer {
 public:
  ActivationLayer(const onnx::NodeProto& node, int64_t opset, const ConstantLookup& constant) {
    const std::string& op = node.op_type();
    need_outputs(node, 1);
    if (op == "Relu") {
      check_attributes(node, {});
      p_.kind = ops::Activation::relu;
    } else if (op == "LeakyRelu") {
      check_attributes(node, {"alpha"});
      p_.kind = ops::Activation::leaky_relu;
      p_.alpha = attr_float(node, "alpha", 0.01f);
    } else if (op == "Sigmoid") {
      check_attributes(node, {});
      p_.kind = ops::Activation::sigmoid;
    } else if (op == "Tanh") {
      check_attributes(node, {});
      p_.kind = ops::Activation::tanh;
    } else {  // Clip
      p_.kind = ops::Activation::clip;
      if (opset < 11) {
        check_attributes(node, {"min", "max"});
        p_.lo = attr_float(node, "min", p_.lo);
        p_.hi = attr_float(node, "max", p_.hi);
      } else {
        check_attributes(node, {});
        for (int i = 1; i <= 2 && i < node.input_size(); ++i) {
          if (node.input(i).empty()) continue;
          const Value* v = constant(i);
          if (!v || v->is_int || v->t.numel() != 1)
            unsupported("Clip " + std::string(i == 1 ? "min" : "max") + " input '" + node.input(i) +
                        "' must be a constant fp32 scalar");
          (i == 1 ? p_.lo : p_.hi) = v->t.data()[0];
        }
      }
    }
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext&) override {
    out[0] = Value::of(ops::activation_forward(tensor_in(in, 0, "activation"), p_));
  }
  void backward(const std::vector<const Value*>& in, const std::vector<const Value*>& out, const Tensor& gy,
                std::vector<Tensor>& gin, const std::vector<bool>&) override {
    gin[0] = ops::activation_backward(ops::activation_saves_output(p_.kind) ? out[0]->t : in[0]->t, gy, p_);
  }
  bool keeps_input(int i) const override { return i == 0 && !ops::activation_saves_output(p_.kind); }
  bool keeps_output(int i) const override { return i == 0 && ops::activation_saves_output(p_.kind); }

 private:
  ops::ActivationParams p_;
};

// ------------------------------------------------------------------------------------------
class PoolLayer : public Layer {
 public:
  enum Kind { max, average, global_average };
  PoolLayer(const onnx::NodeProto& node, int64_t opset, Kind kind) : kind_(kind) {
    need_outputs(node, 1);
    if (kind == global_average) {
      check_attributes(node, {});
      return;
    }
    if (kind == max)
      check_attributes(node, {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"});
    else
      check_attributes(node, {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"});
    if (attr_ints(node, "kernel_shape").empty()) throw_error(ErrorKind::bad_input, node.op_type() + " without kernel_shape");
    check_spatial_rank(node, spatial_rank(node));
    is_3d_ = attr_ints(node, "kernel_shape").size() == 3;
    const bool ceil_mode = attr_int(node, "ceil_mode", 0) != 0, count_include_pad = attr_int(node, "count_include_pad", 0) != 0;
    if (is_3d_) {
      read_window<3>(node, 1, p3_);
      p3_.ceil_mode = ceil_mode;
      p3_.count_include_pad = count_include_pad;
    } else {
      read_window<2>(node, 1, p_);
      p_.ceil_mode = ceil_mode;
      p_.count_include_pad = count_include_pad;
    }
    (void)opset;
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext& ctx) override {
    const Tensor& x = tensor_in(in, 0, "pooling");
    x_shape_ = x.shape();
    x_layout_ = x.layout();
    switch (kind_) {
      case max:
        out[0] = Value::of(is_3d_ ? ops::maxpool3d_forward(x, p3_, ctx.mode != Mode::inference ? &saved_ : nullptr)
                                  : ops::maxpool_forward(x, p_, ctx.mode != Mode::inference ? &saved_ : nullptr));
        break;
      case average:
        out[0] = Value::of(is_3d_ ? ops::avgpool3d_forward(x, p3_) : ops::avgpool_forward(x, p_));
        break;
      case global_average:
        out[0] = Value::of(ops::global_avgpool_forward(x));
        break;
    }
  }
  void backward(const std::vector<const Value*>&, const std::vector<const Value*>&, const Tensor& gy, std::vector<Tensor>& gin,
                const std::vector<bool>&) override {
    switch (kind_) {
      case max:
        gin[0] = is_3d_ ? ops::maxpool3d_backward(x_shape_, saved_, gy) : ops::maxpool_backward(x_shape_, saved_, gy);
        break;
      case average:
        gin[0] = is_3d_ ? ops::avgpool3d_backward(x_shape_, p3_, gy) : ops::avgpool_backward(x_shape_, p_, gy);
        break;
      case global_average: {
        Tensor like(x_shape_, x_layout_);
        gin[0] = ops::global_avgpool_backward(like, to_layout(gy, Layout::plain));
        break;
      }
    }
  }

 private:
  Kind kind_;
  bool is_3d_ = false;  // 3 spatial dims (5-D input, plain NCDHW)
  ops::Pool2dParams p_;
  ops::Pool3dParams p3_;
  ops::MaxPoolSaved saved_;
  Shape x_shape_;
  Layout x_layout_ = Layout::plain;
};

// ------------------------------------------------------------------------------------------
class GemmLayer : public Layer {
 public:
  explicit GemmLayer(const onnx::NodeProto& node) {
    check_attributes(node, {"alpha", "beta", "transA", "transB", "broadcast"});
    need_outputs(node, 1);
    p_.alpha = attr_float(node, "alpha", 1.0f);
    p_.beta = attr_float(node, "beta", 1.0f);
    p_.trans_a = attr_int(node, "transA", 0) != 0;
    p_.trans_b = attr_int(node, "transB", 0) != 0;
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext&) override {
    out[0] = Value::of(
        ops::gemm_forward(to_layout(tensor_in(in, 0, "Gemm"), Layout::plain), tensor_in(in, 1, "Gemm"), optional_in(in, 2), p_));
  }
  void backward(const std::vector<const Value*>& in, const std::vector<const Value*>&, const Tensor& gy, std::vector<Tensor>& gin,
                const std::vector<bool>& need) override {
    const Tensor C = optional_in(in, 2);
    ops::gemm_backward(to_layout(in[0]->t, Layout::plain), in[1]->t, C, p_, gy, need[0] ? &gin[0] : nullptr,
                       need[1] ? &gin[1] : nullptr, (need.size() > 2 && need[2] && C.defined()) ? &gin[2] : nullptr);
  }
  bool keeps_input(int i) const override { return i <= 2; }

 private:
  ops::GemmParams p_;
};

class SparseFclLayer : public Layer {
 public:
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext&) override {
    out[0] = Value::of(ops::sparse_fcl_forward(tensor_in(in, 0, "sparse FCL"), tensor_in(in, 1, "sparse FCL"), optional_in(in, 2),
                                               tensor_in(in, 3, "sparse FCL"), optional_in(in, 4), &saved_));
  }
  void backward(const std::vector<const Value*>& in, const std::vector<const Value*>&, const Tensor& gy, std::vector<Tensor>& gin,
                const std::vector<bool>& need) override {
    auto want = [&](size_t i) { return need.size() > i && need[i] && in.size() > i && in[i] ? &gin[i] : nullptr; };
    ops::sparse_fcl_backward(in[0]->t, in[1]->t, in[3]->t, saved_, gy, want(0), want(1), want(2), want(3), want(4));
  }
  bool differentiable_input(int i) const override { return i >= 0 && i <= 4; }
  bool keeps_input(int i) const override { return i == 0 || i == 1 || i == 3; }

 private:
  ops::SparseFclSaved saved_;
};

class MatMulLayer : public Layer {
 public:
  explicit MatMulLayer(const onnx::NodeProto& node) {
    check_attributes(node, {});
    need_outputs(node, 1);
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext&) override {
    out[0] = Value::of(ops::matmul_forward(tensor_in(in, 0, "MatMul"), tensor_in(in, 1, "MatMul")));
  }
  void backward(const std::vector<const Value*>& in, const std::vector<const Value*>&, const Tensor& gy, std::vector<Tensor>& gin,
                const std::vector<bool>& need) override {
    ops::matmul_backward(in[0]->t, in[1]->t, gy, need[0] ? &gin[0] : nullptr, need[1] ? &gin[1] : nullptr);
  }
  bool keeps_input(int i) const override { return i <= 1; }
};

// ------------------------------------------------------------------------------------------
class BinaryLayer : public Layer {
 public:
  BinaryLayer(const onnx::NodeProto& node, int64_t opset) {
    check_attributes(node, {"broadcast", "axis"});
    if (opset < 7 && node.attribute_size()) unsupported(node.op_type() + " with legacy broadcast attributes");
    need_outputs(node, 1);
    op_ = node.op_type() == "Add" ? ops::BinaryOp::add : node.op_type() == "Sub" ? ops::BinaryOp::sub : ops::BinaryOp::mul;
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext&) override {
    const Tensor& a = tensor_in(in, 0, "binary operator");
    const Tensor& b = tensor_in(in, 1, "binary operator");
    shapes_[0] = a.shape();
    shapes_[1] = b.shape();
    layouts_[0] = a.layout();
    layouts_[1] = b.layout();
    out[0] = Value::of(ops::binary_forward(op_, a, b));
  }
  void backward(const std::vector<const Value*>& in, const std::vector<const Value*>&, const Tensor& gy, std::vector<Tensor>& gin,
                const std::vector<bool>& need) override {
    if (op_ == ops::BinaryOp::mul) {
      ops::binary_backward(op_, in[0]->t, in[1]->t, gy, need[0] ? &gin[0] : nullptr, need[1] ? &gin[1] : nullptr);
      return;
    }
    ops::add_sub_backward(op_, shapes_[0], layouts_[0], shapes_[1], layouts_[1], gy, need[0] ? &gin[0] : nullptr,
                          need[1] ? &gin[1] : nullptr);
  }
  bool keeps_input(int i) const override { return i <= 1 && op_ == ops::BinaryOp::mul; }

 private:
  ops::BinaryOp op_;
  Shape shapes_[2];
  Layout layouts_[2] = {Layout::plain, Layout::plain};
};

class SumLayer : public Layer {
 public:
  explicit SumLayer(const onnx::NodeProto& node) {
    check_attributes(node, {});
    need_outputs(node, 1);
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext&) override {
    Tensor acc = tensor_in(in, 0, "Sum");
    if (in.size() == 1) acc = acc.clone();
    shapes_.assign(1, acc.shape());
    for (size_t i = 1; i < in.size(); ++i) {
      const Tensor& t = tensor_in(in, i, "Sum");
      shapes_.push_back(t.shape());
      acc = ops::binary_forward(ops::BinaryOp::add, acc, t);
    }
    out[0] = Value::of(acc);
  }
  void backward(const std::vector<const Value*>&, const std::vector<const Value*>&, const Tensor& gy, std::vector<Tensor>& gin,
                const std::vector<bool>& need) override {
    for (size_t i = 0; i < shapes_.size(); ++i)
      if (need[i]) gin[i] = ops::reduce_to_shape(gy.shape() == shapes_[i] ? gy : to_layout(gy, Layout::plain), shapes_[i]);
  }

 private:
  std::vector<Shape> shapes_;
};

// ------------------------------------------------------------------------------------------
// Flatten, Reshape, Identity: views (same values, another shape); Reshape also accepts a
// runtime int64 shape from shape arithmetic.
class ReshapeLayer : public Layer {
 public:
  enum Kind { flatten, reshape, identity };
  ReshapeLayer(const onnx::NodeProto& node, int64_t opset, Kind kind) : kind_(kind) {
    need_outputs(node, 1);
    if (kind == flatten) {
      check_attributes(node, {"axis"});
      axis_ = attr_int(node, "axis", 1);
    } else if (kind == reshape) {
      check_attributes(node, {"allowzero", "shape"});
      if (opset < 5) unsupported("Reshape with a shape attribute (opset < 5)");
      allowzero_ = attr_int(node, "allowzero", 0) != 0;
    } else {
      check_attributes(node, {});
    }
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext&) override {
    if (kind_ == identity) {
      out[0] = *in.at(0);
      return;
    }
    const Tensor& x = tensor_in(in, 0, kind_ == flatten ? "Flatten" : "Reshape");
    x_shape_ = x.shape();
    x_layout_ = x.layout();
    const Tensor xp = to_layout(x, Layout::plain);
    Shape s;
    if (kind_ == flatten) {
      const int64_t r = x.rank();
      const int64_t a = axis_ < 0 ? axis_ + r : axis_;
      if (a < 0 || a > r)
        throw_error(ErrorKind::bad_input, "Flatten axis " + std::to_string(axis_) + " for rank " + std::to_string(r));
      int64_t outer = 1;
      for (int64_t d = 0; d < a; ++d) outer *= x.dim(static_cast<int>(d));
      s = {outer, outer ? x.numel() / outer : 0};
    } else {
      if (in.size() < 2 || !in[1] || !in[1]->is_int)
        unsupported("Reshape shape input must be an int64 constant or shape arithmetic");
      s = in[1]->ints;
      int64_t known = 1, infer = -1;
      for (size_t d = 0; d < s.size(); ++d) {
        if (s[d] == 0 && !allowzero_) {
          if (d >= x_shape_.size())
            throw_error(ErrorKind::bad_input,
                        "Reshape copies dim " + std::to_string(d) + " of a rank-" + std::to_string(x_shape_.size()) + " input");
          s[d] = x_shape_[d];
        }
        if (s[d] == -1) {
          if (infer >= 0) throw_error(ErrorKind::bad_input, "Reshape shape with more than one -1");
          infer = static_cast<int64_t>(d);
        } else if (s[d] < 0) {
          throw_error(ErrorKind::bad_input, "Reshape shape with dim " + std::to_string(s[d]));
        } else {
          known *= s[d];
        }
      }
      if (infer >= 0) {
        if (known == 0 || x.numel() % known)
          throw_error(ErrorKind::bad_input,
                      "Reshape cannot infer -1 for " + shape_to_string(x_shape_) + " -> " + shape_to_string(in[1]->ints));
        s[infer] = x.numel() / known;
      }
    }
    out[0] = Value::of(xp.reshaped(s));
  }
  void backward(const std::vector<const Value*>& in, const std::vector<const Value*>&, const Tensor& gy, std::vector<Tensor>& gin,
                const std::vector<bool>&) override {
    if (kind_ == identity) {
      gin[0] = gy;
      return;
    }
    (void)in;
    gin[0] = to_layout(gy, Layout::plain).reshaped(x_shape_);
  }

 private:
  Kind kind_;
  int64_t axis_ = 1;
  bool allowzero_ = false;
  Shape x_shape_;
  Layout x_layout_ = Layout::plain;
};

// ------------------------------------------------------------------------------------------
class ConcatLayer : public Layer {
 public:
  explicit ConcatLayer(const onnx::NodeProto& node) {
    check_attributes(node, {"axis"});
    need_outputs(node, 1);
    if (!onnxu::find_attribute(node, "axis")) throw_error(ErrorKind::bad_input, "Concat without axis");
    axis_ = attr_int(node, "axis", 0);
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext&) override {
    bool ints = !in.empty();
    for (const Value* v : in) ints = ints && v && v->is_int;
    if (ints) {  // shape arithmetic: 1-D int64 tensors
      std::vector<int64_t> r;
      for (const Value* v : in) r.insert(r.end(), v->ints.begin(), v->ints.end());
      out[0] = Value::of_ints(r, {static_cast<int64_t>(r.size())});
      return;
    }
    std::vector<Tensor> xs;
    shapes_.clear();
    for (size_t i = 0; i < in.size(); ++i) {
      xs.push_back(tensor_in(in, i, "Concat"));
      shapes_.push_back(xs.back().shape());
    }
    out[0] = Value::of(ops::concat_forward(xs, axis_));
  }
  void backward(const std::vector<const Value*>&, const std::vector<const Value*>&, const Tensor& gy, std::vector<Tensor>& gin,
                const std::vector<bool>& need) override {
    auto parts = ops::concat_backward(shapes_, axis_, gy);
    for (size_t i = 0; i < parts.size(); ++i)
      if (need[i]) gin[i] = std::move(parts[i]);
  }

 private:
  int64_t axis_;
  std::vector<Shape> shapes_;
};

// ------------------------------------------------------------------------------------------
class DropoutLayer : public Layer {
 public:
  DropoutLayer(const onnx::NodeProto& node, int64_t opset, const ConstantLookup& constant) {
    need_outputs(node, 2);  // output 1: the mask, as an integer (0/1) value
    mask_out_ = node.output_size() > 1 && !node.output(1).empty();
    if (opset < 12) {
      check_attributes(node, {"ratio", "is_test"});
      ratio_ = attr_float(node, "ratio", 0.5f);
    } else {
      check_attributes(node, {"seed"});
      if (node.input_size() > 1 && !node.input(1).empty()) {
        const Value* v = constant(1);
        if (!v || v->is_int || v->t.numel() != 1) unsupported("Dropout ratio input must be a constant fp32 scalar");
        ratio_ = v->t.data()[0];
      }
      if (node.input_size() > 2 && !node.input(2).empty()) {
        const Value* v = constant(2);
        if (!v) unsupported("Dropout training_mode input must be a constant");
        forced_ = v->is_int ? (!v->ints.empty() && v->ints[0] != 0) : (v->t.numel() && v->t.data()[0] != 0);
        forced_set_ = true;
      }
    }
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext& ctx) override {
    const Tensor& x = tensor_in(in, 0, "Dropout");
    active_ = forced_set_ ? forced_ : ctx.mode == Mode::training;
    if (!active_ || ratio_ == 0.0f) {
      active_ = false;
      out[0] = Value::of(x);
      if (mask_out_) out[1] = Value::of_ints(std::vector<int64_t>(static_cast<size_t>(x.numel()), 1), x.shape());
      return;
    }
    layout_ = x.layout();
    out[0] = Value::of(ops::dropout_forward(x, ratio_, *ctx.rng, mask_));
    if (mask_out_) {
      std::vector<int64_t> m(mask_.begin(), mask_.end());
      if (x.layout() == Layout::nhwc) {  // mask_ follows x's memory order; report it in NCHW order
        const int64_t N = x.dim(0), C = x.dim(1), HW = x.dim(2) * x.dim(3);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t c = 0; c < C; ++c)
            for (int64_t p = 0; p < HW; ++p) m[(n * C + c) * HW + p] = mask_[(n * HW + p) * C + c];
      }
      out[1] = Value::of_ints(std::move(m), x.shape());
    }
  }
  void backward(const std::vector<const Value*>&, const std::vector<const Value*>&, const Tensor& gy, std::vector<Tensor>& gin,
                const std::vector<bool>&) override {
    gin[0] = active_ ? ops::dropout_backward(gy, ratio_, mask_, layout_) : gy;
  }

 private:
  float ratio_ = 0.5f;
  bool forced_ = false, forced_set_ = false, active_ = false, mask_out_ = false;
  Layout layout_ = Layout::plain;
  std::vector<uint8_t> mask_;
};

class SoftmaxLayer : public Layer {
 public:
  SoftmaxLayer(const onnx::NodeProto& node, int64_t opset) {
    check_attributes(node, {"axis"});
    need_outputs(node, 1);
    legacy_ = opset < 13;
    axis_ = attr_int(node, "axis", legacy_ ? 1 : -1);
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext&) override {
    out[0] = Value::of(ops::softmax_forward(tensor_in(in, 0, "Softmax"), axis_, legacy_));
  }
  void backward(const std::vector<const Value*>&, const std::vector<const Value*>& out, const Tensor& gy,
                std::vector<Tensor>& gin, const std::vector<bool>&) override {
    gin[0] = ops::softmax_backward(out[0]->t, gy, axis_, legacy_);
  }
  bool keeps_output(int i) const override { return i == 0; }

 private:
  int64_t axis_;
  bool legacy_;
};

// ------------------------------------------------------------------------------------------
class TransposeLayer : public Layer {
 public:
  explicit TransposeLayer(const onnx::NodeProto& node) {
    check_attributes(node, {"perm"});
    need_outputs(node, 1);
    perm_ = attr_ints(node, "perm");
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext&) override {
    const Tensor& x = tensor_in(in, 0, "Transpose");
    rank_ = x.rank();
    out[0] = Value::of(ops::transpose_forward(x, perm_));
  }
  void backward(const std::vector<const Value*>&, const std::vector<const Value*>&, const Tensor& gy, std::vector<Tensor>& gin,
                const std::vector<bool>&) override {
    gin[0] = ops::transpose_forward(gy, ops::inverse_permutation(perm_, rank_));
  }

 private:
  std::vector<int64_t> perm_;
  int rank_ = 0;
};

class PadLayer : public Layer {
 public:
  PadLayer(const onnx::NodeProto& node, int64_t opset, const ConstantLookup& constant) : opset_(opset) {
    need_outputs(node, 1);
    if (opset < 11) {
      check_attributes(node, {"mode", "pads", "value"});
      pads_ = attr_ints(node, "pads");
      value_ = attr_float(node, "value", 0.0f);
    } else {
      check_attributes(node, {"mode"});
      if (node.input_size() > 2 && !node.input(2).empty()) {
        const Value* v = constant(2);
        if (!v || v->is_int || v->t.numel() != 1) unsupported("Pad constant_value must be a constant fp32 scalar");
        value_ = v->t.data()[0];
      }
      if (node.input_size() > 3 && !node.input(3).empty()) {
        const Value* v = constant(3);
        if (!v || !v->is_int) unsupported("Pad axes must be an int64 constant");
        axes_ = v->ints;
        has_axes_ = true;
      }
    }
    const std::string mode = attr_string(node, "mode", "constant");
    if (mode != "constant") unsupported("Pad mode '" + mode + "' (only constant)");
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext&) override {
    const Tensor& x = tensor_in(in, 0, "Pad");
    x_shape_ = x.shape();
    const int r = x.rank();
    std::vector<int64_t> given = pads_;
    if (opset_ >= 11) {
      if (in.size() < 2 || !in[1] || !in[1]->is_int) unsupported("Pad pads input must be an int64 constant or shape arithmetic");
      given = in[1]->ints;
    }
    full_.assign(static_cast<size_t>(2 * r), 0);
    if (has_axes_) {
      if (given.size() != 2 * axes_.size()) throw_error(ErrorKind::bad_input, "Pad pads do not match its axes");
      for (size_t i = 0; i < axes_.size(); ++i) {
        const int64_t a = axes_[i] < 0 ? axes_[i] + r : axes_[i];
        if (a < 0 || a >= r) throw_error(ErrorKind::bad_input, "Pad axis out of range");
        full_[a] = given[i];
        full_[a + r] = given[i + axes_.size()];
      }
    } else {
      full_ = given;
    }
    out[0] = Value::of(ops::pad_forward(x, full_, value_));
  }
  void backward(const std::vector<const Value*>&, const std::vector<const Value*>&, const Tensor& gy, std::vector<Tensor>& gin,
                const std::vector<bool>&) override {
    gin[0] = ops::pad_backward(x_shape_, full_, gy);
  }

 private:
  int64_t opset_;
  std::vector<int64_t> pads_, axes_, full_;
  bool has_axes_ = false;
  float value_ = 0.0f;
  Shape x_shape_;
};

// ------------------------------------------------------------------------------------------
// Shape arithmetic on the host: Shape, Gather, Unsqueeze, Squeeze, Cast, Constant,
// ConstantOfShape. Folded at load when their inputs are constant; otherwise evaluated per run.
}  // namespace

Value value_from_proto(const onnx::TensorProto& p) {
  const int32_t dt = p.data_type();
  if (dt == onnx::TensorProto::INT64 || dt == onnx::TensorProto::INT32)
    return Value::of_ints(onnxu::to_int64s(p), onnxu::dims_of(p));
  if (dt == onnx::TensorProto::BOOL || dt == onnx::TensorProto::INT8 || dt == onnx::TensorProto::UINT8 ||
      dt == onnx::TensorProto::INT16 || dt == onnx::TensorProto::UINT16 || dt == onnx::TensorProto::UINT32) {
    std::vector<int64_t> v;
    for (double d : onnxu::to_doubles(p)) v.push_back(static_cast<int64_t>(d));
    return Value::of_ints(v, onnxu::dims_of(p));
  }
  return Value::of(tensor_from_proto(p));
}

namespace {

class ShapeArithLayer : public Layer {
 public:
  ShapeArithLayer(const onnx::NodeProto& node, int64_t opset) : op_(node.op_type()), opset_(opset) {
    need_outputs(node, 1);
    if (op_ == "Shape") {
      check_attributes(node, {"start", "end"});
      start_ = attr_int(node, "start", 0);
      end_ = attr_int(node, "end", INT64_MAX);
    } else if (op_ == "Gather") {
      check_attributes(node, {"axis"});
      if (attr_int(node, "axis", 0) != 0) unsupported("Gather with axis != 0 (only shape arithmetic is supported)");
    } else if (op_ == "Unsqueeze" || op_ == "Squeeze") {
      check_attributes(node, {"axes"});
      axes_ = attr_ints(node, "axes");
    } else if (op_ == "Cast") {
      check_attributes(node, {"to", "saturate"});
      to_ = attr_int(node, "to", 0);
    } else if (op_ == "Slice") {  // of a 1-D integer shape value (converters write Flatten so)
      check_attributes(node, {"starts", "ends", "axes"});
      starts_ = attr_ints(node, "starts");  // opset < 10; from 10 on, inputs 1-4
      ends_ = attr_ints(node, "ends");
      axes_ = attr_ints(node, "axes");
    } else if (op_ == "Constant") {
      if (node.attribute_size() != 1) unsupported("Constant without exactly one value attribute");
      const auto& a = node.attribute(0);
      if (a.name() == "value")
        constant_ = value_from_proto(a.t());
      else if (a.name() == "value_float")
        constant_ = Value::of(Tensor::from_values({}, {a.f()}));
      else if (a.name() == "value_floats")
        constant_ = Value::of(Tensor::from_values({a.floats_size()}, std::vector<float>(a.floats().begin(), a.floats().end())));
      else if (a.name() == "value_int")
        constant_ = Value::of_ints({a.i()}, {});
      else if (a.name() == "value_ints")
        constant_ = Value::of_ints(std::vector<int64_t>(a.ints().begin(), a.ints().end()), {a.ints_size()});
      else
        unsupported("Constant with attribute '" + a.name() + "'");
    } else if (op_ == "ConstantOfShape") {
      check_attributes(node, {"value"});
      const auto* a = onnxu::find_attribute(node, "value");
      fill_ = a ? value_from_proto(a->t()) : Value::of(Tensor::from_values({1}, {0.0f}));
    }
  }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext&) override {
    if (op_ == "Constant") {
      out[0] = constant_;
    } else if (op_ == "Shape") {
      const Value& v = need(in, 0);
      const Shape s = v.is_int ? v.int_shape : v.t.shape();
      const int64_t r = static_cast<int64_t>(s.size());
      int64_t b = start_ < 0 ? start_ + r : start_, e = end_ < 0 ? end_ + r : end_;
      b = std::clamp<int64_t>(b, 0, r);
      e = std::clamp<int64_t>(e, 0, r);
      std::vector<int64_t> d(s.begin() + b, s.begin() + std::max(b, e));
      out[0] = Value::of_ints(d, {static_cast<int64_t>(d.size())});
    } else if (op_ == "Gather") {
      const Value& data = need_int(in, 0);
      const Value& idx = need_int(in, 1);
      if (data.int_shape.size() != 1) unsupported("Gather on a non-1-D int64 tensor");
      std::vector<int64_t> r;
      const int64_t n = static_cast<int64_t>(data.ints.size());
      for (int64_t i : idx.ints) {
        if (i < -n || i >= n) throw_error(ErrorKind::bad_input, "Gather index " + std::to_string(i) + " out of range");
        r.push_back(data.ints[i < 0 ? i + n : i]);
      }
      out[0] = Value::of_ints(r, idx.int_shape);
    } else if (op_ == "Unsqueeze" || op_ == "Squeeze") {
      const Value& v = need(in, 0);
      std::vector<int64_t> axes = axes_;
      if (opset_ >= 13 && in.size() > 1 && in[1]) axes = need_int(in, 1).ints;
      Shape s = v.is_int ? v.int_shape : v.t.shape();
      if (op_ == "Unsqueeze") {
        const int64_t r = static_cast<int64_t>(s.size() + axes.size());
        for (int64_t& a : axes) a = a < 0 ? a + r : a;
        std::sort(axes.begin(), axes.end());
        for (int64_t a : axes) {
          if (a < 0 || a > static_cast<int64_t>(s.size())) throw_error(ErrorKind::bad_input, "Unsqueeze axis out of range");
          s.insert(s.begin() + a, 1);
        }
      } else {
        const int64_t r = static_cast<int64_t>(s.size());
        std::set<int64_t> drop;
        for (int64_t a : axes) drop.insert(a < 0 ? a + r : a);
        Shape t;
        for (int64_t d = 0; d < r; ++d)
          if (!(axes.empty() ? s[d] == 1 : drop.count(d) > 0)) t.push_back(s[d]);
        s = t;
      }
      if (v.is_int)
        out[0] = Value::of_ints(v.ints, s);
      else
        out[0] = Value::of(to_layout(v.t, Layout::plain).reshaped(s));
    } else if (op_ == "Slice") {
      const Value& data = need(in, 0);
      if (!data.is_int || data.int_shape.size() != 1)
        unsupported("Slice of anything but a 1-D integer shape value (only shape arithmetic is supported)");
      std::vector<int64_t> starts = starts_, ends = ends_, axes = axes_, steps;
      if (opset_ >= 10) {
        starts = need_int(in, 1).ints;
        ends = need_int(in, 2).ints;
        axes = in.size() > 3 && in[3] && in[3]->defined() ? need_int(in, 3).ints : std::vector<int64_t>{};
        steps = in.size() > 4 && in[4] && in[4]->defined() ? need_int(in, 4).ints : std::vector<int64_t>{};
      }
      if (starts.size() != 1 || ends.size() != 1 || axes.size() > 1 || steps.size() > 1 ||
          (!axes.empty() && axes[0] != 0 && axes[0] != -1))
        unsupported("Slice of a shape value along more than its one axis");
      const int64_t n = static_cast<int64_t>(data.ints.size()), step = steps.empty() ? 1 : steps[0];
      if (step == 0) throw_error(ErrorKind::bad_input, "Slice step 0");
      // ONNX: negative indices count from the end; clamped to [0, n] (step > 0) or [-1, n-1] (step < 0).
      auto clamp = [&](int64_t i, bool end) {
        if (i < 0) i += n;
        return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, end ? n - 1 : n - 1);
      };
      std::vector<int64_t> r;
      for (int64_t i = clamp(starts[0], false), e = clamp(ends[0], true); step > 0 ? i < e : i > e; i += step)
        r.push_back(data.ints[static_cast<size_t>(i)]);
      out[0] = Value::of_ints(r, {static_cast<int64_t>(r.size())});
    } else if (op_ == "Cast") {
      const Value& v = need(in, 0);
      const bool to_float = to_ == onnx::TensorProto::FLOAT || to_ == onnx::TensorProto::DOUBLE;
      if (v.is_int && !to_float)
        out[0] = v;
      else if (!v.is_int && to_float)
        out[0] = v;
      else if (v.is_int) {
        Tensor t(v.int_shape);
        for (size_t i = 0; i < v.ints.size(); ++i) t.data()[i] = static_cast<float>(v.ints[i]);
        out[0] = Value::of(t);
      } else {
        unsupported("Cast of a float tensor to " + onnxu::dtype_name(static_cast<int32_t>(to_)));
      }
    } else {  // ConstantOfShape
      const Value& s = need_int(in, 0);
      if (fill_.is_int) {
        out[0] = Value::of_ints(std::vector<int64_t>(static_cast<size_t>(shape_numel(s.ints)), fill_.ints.at(0)), s.ints);
      } else {
        out[0] = Value::of(Tensor::full(s.ints, fill_.t.data()[0]));
      }
    }
  }

 private:
  static const Value& need(const std::vector<const Value*>& in, size_t i) {
    if (i >= in.size() || !in[i] || !in[i]->defined())
      throw_error(ErrorKind::bad_input, "input " + std::to_string(i) + " is missing");
    return *in[i];
  }
  static const Value& need_int(const std::vector<const Value*>& in, size_t i) {
    const Value& v = need(in, i);
    if (!v.is_int) unsupported("input " + std::to_string(i) + " must be an integer tensor");
    return v;
  }
  std::string op_;
  int64_t opset_;
  int64_t start_ = 0, end_ = INT64_MAX, to_ = 0;
  std::vector<int64_t> axes_, starts_, ends_;
  Value constant_, fill_;
};

}  // namespace

bool is_foldable(const std::string& op) {
  static const std::set<std::string> ops = {"Shape",    "Gather",          "Unsqueeze", "Squeeze", "Cast",
                                            "Constant", "ConstantOfShape", "Concat",    "Slice"};
  return ops.count(op) > 0;
}

namespace {

std::unique_ptr<Layer> bind(const onnx::NodeProto& node, int64_t opset, const ConstantLookup& constant) {
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    unsupported("operator domain '" + node.domain() + "' (" + node.op_type() + ")");
  if (opset < 7 || opset > 21) unsupported("opset " + std::to_string(opset) + " (supported: 7 to 21)");
  const std::string& op = node.op_type();
  if (op == "Conv") return std::make_unique<ConvLayer>(node, constant);
  if (op == "BatchNormalization") return std::make_unique<BatchNormLayer>(node, opset);
  if (op == "Relu" || op == "LeakyRelu" || op == "Sigmoid" || op == "Tanh" || op == "Clip")
    return std::make_unique<ActivationLayer>(node, opset, constant);
  if (op == "MaxPool") return std::make_unique<PoolLayer>(node, opset, PoolLayer::max);
  if (op == "AveragePool") return std::make_unique<PoolLayer>(node, opset, PoolLayer::average);
  if (op == "GlobalAveragePool") return std::make_unique<PoolLayer>(node, opset, PoolLayer::global_average);
  if (op == "Gemm") return std::make_unique<GemmLayer>(node);
  if (op == "MatMul") return std::make_unique<MatMulLayer>(node);
  if (op == "Add" || op == "Sub" || op == "Mul") return std::make_unique<BinaryLayer>(node, opset);
  if (op == "Sum") return std::make_unique<SumLayer>(node);
  if (op == "Flatten") return std::make_unique<ReshapeLayer>(node, opset, ReshapeLayer::flatten);
  if (op == "Reshape") return std::make_unique<ReshapeLayer>(node, opset, ReshapeLayer::reshape);
  if (op == "Identity") return std::make_unique<ReshapeLayer>(node, opset, ReshapeLayer::identity);
  if (op == "Concat") return std::make_unique<ConcatLayer>(node);
  if (op == "Dropout") return std::make_unique<DropoutLayer>(node, opset, constant);
  if (op == "Softmax") return std::make_unique<SoftmaxLayer>(node, opset);
  if (op == "Transpose") return std::make_unique<TransposeLayer>(node);
  if (op == "Pad") return std::make_unique<PadLayer>(node, opset, constant);
  if (op == "Shape" || op == "Gather" || op == "Unsqueeze" || op == "Squeeze" || op == "Cast" || op == "Constant" ||
      op == "ConstantOfShape" || op == "Slice")
    return std::make_unique<ShapeArithLayer>(node, opset);
  unsupported("operator " + op + " is not supported by the training engine");
}

}  // namespace

std::unique_ptr<Layer> make_sparse_fcl_layer() { return std::make_unique<SparseFclLayer>(); }

std::unique_ptr<Layer> make_layer(const onnx::NodeProto& node, int64_t opset, const ConstantLookup& constant,
                                  SlabExchange* slabs) {
  if (node.domain() == kSpatialDomain) {
    std::unique_ptr<Layer> layer = make_spatial_layer(node, slabs);
    if (node.op_type() == "BatchNormalization") {  // a slab's: the operator facts of the ONNX one
      onnx::NodeProto plain = node;
      plain.clear_domain();
      layer->signature_ = onnxu::find_signature(plain, opset);
    }
    return layer;
  }
  std::unique_ptr<Layer> layer = bind(node, opset, constant);
  layer->signature_ = onnxu::find_signature(node, opset);
  return layer;
}

}  // namespace hpcnn::nn::detail
