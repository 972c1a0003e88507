// hpcnn nn (internal): one bound ONNX node of a planned graph: a Layer runs its operator's
// forward and backward kernels (lib/ops) with attributes parsed once at load.
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "nn/batchnorm_statistics.h"
#include "nn/model.h"
#include "onnx/op_facts.h"
#include "tensor/tensor.h"

namespace hpcnn::nn::detail {

// A value flowing through the graph: an fp32 tensor, or a small int64 tensor used for shape
// arithmetic (Shape -> Gather -> Concat -> Reshape), evaluated on the host.
struct Value {
  Tensor t;
  bool is_int = false;
  std::vector<int64_t> ints;
  Shape int_shape;
  bool defined() const { return is_int || t.defined(); }
  static Value of(Tensor t) {
    Value v;
    v.t = std::move(t);
    return v;
  }
  static Value of_ints(std::vector<int64_t> v, Shape shape) {
    Value r;
    r.is_int = true;
    r.ints = std::move(v);
    r.int_shape = std::move(shape);
    return r;
  }
};

struct RunContext {
  Mode mode = Mode::inference;
  std::mt19937_64* rng = nullptr;
};

class Layer {
 public:
  virtual ~Layer() = default;
  // in[i] is null for an omitted optional input. out has one entry per node output.
  virtual void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext& ctx) = 0;
  // gy: gradient of output 0 (defined). gin[i] to be set where need[i].
  virtual void backward(const std::vector<const Value*>& in, const std::vector<const Value*>& out, const Tensor& gy,
                        std::vector<Tensor>& gin, const std::vector<bool>& need) {
    (void)in, (void)out, (void)gy, (void)gin, (void)need;
    throw_unsupported_backward();
  }
  // The operator's input facts (onnx/op_facts.h: which inputs pass gradients, which hold
  // parameters, buffers or constants), set by make_layer for the model's opset; null where the
  // table has none (ConstantOfShape before opset 9): no gradients, initializers are constants.
  const onnxu::Signature* signature() const { return signature_; }
  virtual bool differentiable_input(int i) const { return onnxu::gradient_flows(signature_, i); }
  virtual bool keeps_input(int i) const {
    (void)i;
    return false;
  }  // needed by backward
  virtual bool keeps_output(int i) const {
    (void)i;
    return false;
  }  // needed by backward
  // BatchNormalization after a training-mode forward: that batch's moments, once (then null).
  virtual const ChannelMoments* take_batch_moments() { return nullptr; }
  // BatchNormalization: its momentum (running = momentum * running + (1 - momentum) * batch).
  virtual float batchnorm_momentum() const { return 0.0f; }

 protected:
  [[noreturn]] void throw_unsupported_backward() const;

 private:
  friend std::unique_ptr<Layer> make_layer(const onnx::NodeProto& node, int64_t opset,
                                           const std::function<const Value*(int)>& constant, SlabExchange* slabs);
  const onnxu::Signature* signature_ = nullptr;
};

// Constant lookup at load: the folded constant value of node input i, or null.
using ConstantLookup = std::function<const Value*(int input)>;

// Binds `node` (ErrorKind::unsupported for operators, attributes or dtypes the engine does not
// support, naming them; the caller adds the node's name).
// Nodes of domain "hpcnn" (nn/spatial.h: HaloExchange, SlabGather) run through `slabs`
// (ErrorKind::usage when it is null: a model not built for a spatial split).
std::unique_ptr<Layer> make_layer(const onnx::NodeProto& node, int64_t opset, const ConstantLookup& constant,
                                  SlabExchange* slabs = nullptr);
std::unique_ptr<Layer> make_spatial_layer(const onnx::NodeProto& node, SlabExchange* slabs);
// The structured sparse FCL (ops/sparse_fcl.h) that the planner puts in place of Conv 1x1 ->
// Flatten -> Gemm (transB 1): inputs x, the Conv weight [r, C, 1, 1], its bias (or none), the Gemm
// weight [O, r*H*W], its bias (or none); output y [N, O].
std::unique_ptr<Layer> make_sparse_fcl_layer();
// A constant tensor as a Value: integer and bool dtypes as int64 values, floats as fp32 tensors.
Value value_from_proto(const onnx::TensorProto& proto);
// Whether `op_type` is evaluated at load when all its inputs are constant (shape arithmetic).
bool is_foldable(const std::string& op_type);

}  // namespace hpcnn::nn::detail
