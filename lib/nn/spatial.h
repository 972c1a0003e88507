// hpcnn nn: spatial (model) parallelism of 3-D CNNs along the depth axis: each sample [C, D, H, W]
// is cut into S slabs of D/S planes, one per rank of a group of S ranks (Fugaku's CosmoFlow:
// 4-way spatial x 4096-way data parallelism, mlcommons/hpc_results_v0.7 Fujitsu mesh_cosmoflow;
// LBANN/DiHydrogen distconv, Oyama et al., TPDS 2021).
//
// split_depth() rewrites a model so that every rank of the group runs it on its slab:
//   Conv (3-D)   gets a HaloExchange node in front of it (domain "hpcnn"): the slab grows by `lo`
//                planes from the previous slab and `hi` planes from the next (zeros at the volume's
//                ends: the conv's own padding there), and the conv's depth pads become 0. With pads
//                (pb, pe), kernel k, dilation d and stride s along D: lo = pb, hi = (k-1) d - pb - (s-1).
//                The output slabs line up (output depth x s = input depth) for SAME padding with s
//                dividing D; other convs are refused.
//   MaxPool / AveragePool  stay local when no window crosses a slab boundary (no depth pads,
//                kernel <= stride, the slab depth a multiple of the stride); else refused.
//   Relu, LeakyRelu, Tanh, Sigmoid, Clip, Dropout, Identity, and Add/Sub/Mul of two slabs or of
//                a slab and a value without a depth axis stay local.
//   Anything else that reads a slab (Flatten, Reshape, Gemm, GlobalAveragePool, Pad, Resize,
//                Concat, Transpose, ...) and every graph output gets a SlabGather node in front
//                of it: the slabs are gathered (allgather along D) and the rest of the graph runs
//                whole on every rank of the group. So ops that need neighbours are never run
//                on a slab.
//   BatchNormalization on a slab moves to domain "hpcnn" (same op type, inputs, attributes and
//                operator facts): in training mode its batch statistics are the group's, exactly
//                those of the whole samples: forward sums x and x^2 per channel over the slab and
//                allreduces them over the group (SlabExchange::allreduce_sum) before normalising;
//                backward allreduces sum(gy) and sum(gy * xhat) the same way for the input
//                gradient, while the scale and bias gradients stay this slab's partial sums (the
//                data-parallel allreduce completes them, as for conv weights). The moments it
//                reports for the running statistics are the group's. Inference mode is pointwise
//                and needs nothing from the group. A BatchNormalization with running-statistics
//                outputs (opset 14 training_mode outputs) on a slab is refused.
// Errors (ErrorKind::usage, naming the node and the sizes; before any data is read): a depth that
// S does not divide (input or any split tensor), a slab thinner than a halo, a conv whose output
// slabs would not line up, a pooling window that would cross a slab boundary, a
// BatchNormalization on a slab with extra outputs, a graph input that is not 5-D.
//
// The two nodes run through a SlabExchange that the caller provides (train/ binds it to the
// group's ranks; nn knows no communicator):
//   HaloExchange  forward: the neighbours' boundary planes (2 point-to-point exchanges);
//                 backward: the halo planes' gradients travel back and are added to the
//                 neighbours' boundary planes.
//   SlabGather    forward: allgather of the slabs in group order; backward: this slab's part of
//                 the gradient times `backward_scale` (S: the layers after the gather compute the
//                 replica's whole gradient on each of the S ranks, the slab layers a part of it;
//                 with the slab gradients scaled by S, the data-parallel average over all ranks
//                 gives the mean over the replicas for both kinds of weights).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace hpcnn::nn {

inline constexpr const char* kSpatialDomain = "hpcnn";

// This rank's view of its group of S ranks, slabs in group order.
class SlabExchange {
 public:
  virtual ~SlabExchange() = default;
  virtual int slab() const = 0;   // this rank's slab, 0 <= slab < slabs
  virtual int slabs() const = 0;  // S
  // Sends `to_prev` (n_to_prev floats) to slab - 1 and `to_next` to slab + 1, receives
  // `from_next` (n_from_next floats, the next slab's to_prev) and `from_prev`; at the ends of the
  // volume the missing neighbour sends nothing and the receive buffer is left as it is.
  virtual void exchange(const float* to_prev, size_t n_to_prev, const float* to_next, size_t n_to_next, float* from_prev,
                        size_t n_from_prev, float* from_next, size_t n_from_next) = 0;
  // `count` floats of every slab, in slab order, into `all` (slabs() * count floats).
  virtual void allgather(const float* mine, size_t count, float* all) = 0;
  // Bytes this rank sent by exchange() (the halo traffic), for the tool's counters.
  virtual uint64_t halo_bytes_sent() const = 0;
  // Wall seconds this rank spent in exchange() (waiting for the neighbours included).
  virtual double halo_seconds() const = 0;
  // Sums `count` doubles over the group (through allgather), adding the slabs in slab order on
  // every rank, so that every rank of the group gets the same bits.
  void allreduce_sum(double* data, size_t count);
};

struct HaloPlan {
  std::string conv;  // the Conv node (name or "node #i (Conv)")
  int64_t lo = 0, hi = 0;  // planes received from the previous and the next slab
  int64_t channels = 0, height = 0, width = 0;  // of the conv's input (per sample)
};

struct SpatialSplit {
  onnx::ModelProto model;        // the rewritten model (every rank of the group runs it)
  int slabs = 1;
  int64_t input_depth = 0;       // D of the graph input
  std::vector<HaloPlan> halos;   // one per Conv on a slab, in graph order
  std::vector<std::string> gathered;  // the values gathered (where the graph leaves the slabs)
  // The initializers that a node on a slab reads (Conv weights and biases, BatchNormalization
  // scale and bias, a depthless operand of Add/Sub/Mul): their gradients are this slab's partial
  // sums. Every other initializer is read only by the layers after a SlabGather, which run alike on
  // every rank of the group, so that its gradient is the same on all of them (train/ sums it over
  // the replicas only).
  std::set<std::string> slab_initializers;
  // Forward halo bytes per sample of one interior rank (sum over convs of (lo + hi) * C * H * W * 4).
  uint64_t halo_bytes_per_sample() const;
};

SpatialSplit split_depth(const onnx::ModelProto& model, const std::string& origin, int slabs);

// Slab `slab` of `slabs` of a batch of volumes [N, C, D, H, W] (host, plain): planes
// [slab * D / S, (slab + 1) * D / S). ErrorKind::bad_input when x is not 5-D or S does not divide D.
Tensor depth_slab(const Tensor& x, int slab, int slabs);

}  // namespace hpcnn::nn
