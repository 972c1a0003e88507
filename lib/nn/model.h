// hpcnn nn: the training engine's graph executor for ONNX CNNs (CPU backend).
//
// A Model plans an ONNX graph once at load: constants folded (Constant, ConstantOfShape and
// shape-only subgraphs feeding Reshape), operators bound to kernels (attributes checked for the
// model's opset, 7 to 21), topological order and value lifetimes fixed. Unsupported operators,
// attributes or dtypes fail at load with ErrorKind::unsupported naming the node.
//
// forward() runs it in inference mode (or inference_grad, see Mode) (BatchNormalization uses running statistics, Dropout is
// the identity, activations are released after their last use) or training mode
// (BatchNormalization uses batch statistics; by default running_mean/running_var are updated
// with the node's momentum, see set_batchnorm_statistics() for the other treatments; Dropout
// active; what backward() needs is kept). backward() then accumulates d(loss)/d(parameter) into
// each Parameter's grad, calling the gradient-ready hook for each parameter as soon as its
// gradient is final, and, if requested, the gradients of the graph inputs.
//
// Inputs and outputs are fp32 tensors in ONNX's logical shapes (NCHW for images, NCDHW for
// volumes) and plain layout; inside, 4-D activations live in nhwc (tensor/tensor.h), 5-D ones
// stay plain (3-D Conv and pooling: ops/conv.h, ops/pool.h). Parameters are the float
// initializers that feed differentiable operator inputs (Conv W/B, Gemm A/B/C, BatchNormalization
// scale/B, MatMul operands, Transpose/Pad inputs, non-scalar Add/Sub/Mul/Sum operands); scalars
// and non-differentiable inputs (Clip bounds, Dropout ratio) are constants, and
// BatchNormalization running_mean/running_var are buffers. Not thread-safe: one Model per thread of control; intra-op threads
// come from nn/threads.h.
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/batchnorm_statistics.h"
#include "nn/spatial.h"
#include "tensor/tensor.h"

namespace hpcnn::nn {

// inference: BatchNormalization normalises with its running statistics, Dropout is the identity,
//   nothing is kept for backward. training: batch statistics (running statistics updated as
//   set_batchnorm_statistics() says), Dropout active, backward() possible. inference_grad: the
//   inference function (running statistics, no Dropout, no statistics updated) with what
//   backward() needs kept: the gradients of the model as it evaluates, as PyTorch computes them
//   under model.eval() (the connection sensitivity of prune-rate's data-driven thresholds,
//   Sakai et al., ICPR 2022, Sec. 3.2).
enum class Mode { inference, training, inference_grad };

struct Parameter {
  std::string name;      // initializer name
  Tensor value;          // plain layout, ONNX shape
  Tensor grad;           // same shape; accumulated by backward(), cleared by zero_grad()
  bool no_weight_decay;  // BatchNormalization scale/bias and 1-D biases (Conv B, Gemm C)
};

struct Buffer {      // non-trainable state updated in training mode
  std::string name;  // initializer name (BatchNormalization running mean / var)
  Tensor value;
};

struct ModelOptions {
  bool input_grads = false;  // backward() also computes gradients of the graph inputs
  unsigned seed = 0;         // Dropout masks
  // A depth-split model (nn/spatial.h: split_depth): this rank's group, which its HaloExchange and
  // SlabGather nodes run through (kept alive by the caller for the model's life).
  SlabExchange* slabs = nullptr;
};

class Model {
 public:
  // Takes the model (weights are copied into tensors; external data must be loaded already,
  // see onnx/model.h). `origin` names the model in errors (usually its file path).
  Model(const onnx::ModelProto& model, const std::string& origin, ModelOptions options = {});
  static Model load(const std::string& path, ModelOptions options = {});
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  // Graph inputs that are not initializers, and the graph outputs, in graph order.
  const std::vector<std::string>& input_names() const;
  const std::vector<std::string>& output_names() const;

  // One tensor per input_names() entry (plain layout). Returns one tensor per output.
  // Shapes may change between calls (e.g. a smaller last batch); errors name the node.
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs, Mode mode);

  // After a training-mode forward(): one gradient per output (an undefined Tensor counts as
  // zero). Gradients are added to Parameter::grad.
  void backward(const std::vector<Tensor>& output_grads);
  // Gradients of the graph inputs from the last backward() (needs options.input_grads).
  const std::vector<Tensor>& input_grads() const;

  // Called by backward() once per parameter (its index in parameters()) as soon as no earlier
  // node adds to its gradient: Parameter::grad is then final for this backward (a data-parallel
  // trainer may start sending it while the rest of the backward runs). Parameters that get no
  // gradient in a backward are announced at its end. Null: no hook.
  void set_gradient_ready_hook(std::function<void(size_t parameter)> hook);

  // BatchNormalization statistics (nn/batchnorm_statistics.h). The layers whose running
  // statistics are buffers of this model, in graph order.
  const std::vector<BatchNormLayer>& batchnorm_layers() const;
  void set_batchnorm_statistics(BatchNormStatistics treatment);
  // deferred: the moments recorded since the last call, one entry per training-mode forward,
  // each with one ChannelMoments per batchnorm_layers() entry; clears them.
  std::vector<std::vector<ChannelMoments>> take_batch_moments();
  // collect: the merged moments per batchnorm_layers() entry; clears them.
  std::vector<ChannelMoments> take_collected_moments();
  // running = momentum * running + (1 - momentum) * batch (mean; population variance).
  void update_running_statistics(size_t layer, const ChannelMoments& batch);
  // running_mean = mean, running_var = population variance of `population`.
  void set_running_statistics(size_t layer, const ChannelMoments& population);

  std::vector<Parameter>& parameters();
  std::vector<Buffer>& buffers();
  void zero_grad();

  // Writes current parameter and buffer values back into `model`'s initializers (and graph
  // inputs' initializers), e.g. to save a trained model with onnx/model.h's save_model().
  void export_weights(onnx::ModelProto& model) const;

  // Clears the data of every initializer of `model` that this model holds as a parameter or
  // buffer (its name, dtype and dims stay; export_weights() fills the data again). The other
  // initializers (shapes, constants) keep theirs. A trainer that keeps the ModelProto only to write
  // the trained model later frees a second copy of the weights (35.6 MB for CosmoFlow-128^3).
  void release_exported_weights(onnx::ModelProto& model) const;

  // Reseeds the Dropout mask generator (dist-train reseeds per step from (seed, rank, step),
  // so a resumed run draws the same masks as an uninterrupted one).
  void set_seed(uint64_t seed);

  // For logs: operator type counts after folding, and the trainable parameters and the
  // running-statistics buffers (tensors and elements; onnx/costs.h defines "parameters").
  std::string summary() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpcnn::nn
