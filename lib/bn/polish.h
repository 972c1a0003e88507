// hpcnn bn: BatchNormalization statistics re-estimated on non-augmented data with frozen weights
// (bn-polish): the post-hoc half of Final Polishing (Kasagi et al., "An efficient technique for
// large mini-batch challenge of DNNs training on large scale cluster", HPDC 2020), as PreciseBN
// computes it (Wu & Johnson, "Rethinking 'batch' in BatchNorm", 2021, Sec. 3).
//
// For every BatchNormalization node, over the first K samples (images normalised with the
// model's mean/std only: no crop, no flip, as at test time), in batches of `batch_size`:
//   running_mean[c] = mean of the node's input X over samples and positions of channel c,
//   running_var[c]  = the population variance  sum (x - mean)^2 / n,  n = K * H * W,
// which is ONNX BatchNormalization's training-mode variance (inference uses whatever input_var
// holds; PyTorch's running_var divides by n - 1). Only those two initializers change; every other
// field of the model stays as it was.
//
// Order of layers: a BatchNorm's statistics are computed with the BatchNorms before it already
// updated, so that each sees the normalisation it will see at test time. The nodes are grouped by
// depth (the most BatchNorms on a path from the graph input to the node's input X); pass p runs
// the model in inference mode over the K samples with the inputs of the depth-p nodes as extra
// outputs, then updates them. Cost: (maximum depth + 1) forward passes over K samples; a chain of
// L BatchNorms (the example CNN: 3; ResNet-20: 19, its projection shortcuts share a pass with
// their block's first BatchNorm) takes L passes.
//
// Arithmetic: per batch and channel, count = N * H * W, mean and M2 = sum (x - mean)^2 in double
// (two passes over the batch); batches are merged in batch order with the exact update of Chan,
// Golub & LeVeque (nn/batchnorm_statistics.h). Under mpirun, batch b runs on rank b mod W and the
// per-batch moments are gathered in batch order (an allreduce where each entry has one
// contributor, hence exact; with a spatial split, batch b runs on group b mod (W / slabs) and its
// first rank contributes), so every rank computes the same bits for any world size: not an
// average of per-rank averages, not a momentum average.
//
// Errors: ErrorKind::usage for K larger than the data set (naming the file and its size), batch
// size < 1; ErrorKind::unsupported for a BatchNormalization whose running_mean / running_var are
// not float initializers, or are shared with another node (naming the nodes); ErrorKind::bad_input
// for data the model rejects, or statistics that are not finite (naming the node); model errors
// name the node.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/augment.h"
#include "data/source.h"
#include "dist/communicator.h"

namespace hpcnn::bn {

struct PolishOptions {
  int64_t samples = 0;           // K: the first K samples of the data (0: all of them)
  int64_t batch_size = 256;      // samples per forward batch
  data::Augmentation normalise;  // mean/std (crop and flip are ignored)
  // Spatial split of 3-D models (nn/spatial.h): groups of `slabs` consecutive ranks run each batch,
  // one depth slab per rank (the loader reads only that slab); the BatchNormalization inputs are
  // gathered as extra outputs, so the statistics are those of the whole samples, bit for bit the
  // same as with slabs = 1 up to the summation order of the convolutions. Batch b runs on group
  // b mod (W / slabs). ErrorKind::usage when slabs does not divide the world size, and the
  // split's own errors (nn/spatial.h).
  int slabs = 1;
};

struct LayerStatistics {
  std::string node;   // the node's name (or its output's when it has none)
  std::string input;  // X, the value whose moments are taken
  int64_t channels = 0;
  int pass = 0;                           // the pass (0-based) that computed it
  std::vector<double> old_mean, old_var;  // the initializers as read
  std::vector<double> new_mean, new_var;  // as written (the double moments rounded to float)
};

struct PolishResult {
  int64_t samples = 0, batches = 0;
  int passes = 0;
  std::vector<LayerStatistics> layers;  // graph order
};

// The BatchNormalization nodes of `model` and the pass each belongs to (depth), in graph order.
struct BatchNormNode {
  int node = 0;  // index in graph.node
  int pass = 0;
};
std::vector<BatchNormNode> batchnorm_passes(const onnx::ModelProto& model);

// Re-estimates the running statistics of every BatchNormalization of `model` in place. `origin`
// names the model in errors. `samples` must hold at least options.samples samples.
PolishResult polish_batchnorm(onnx::ModelProto& model, const std::string& origin,
                              std::shared_ptr<const data::SampleSource> samples, const PolishOptions& options,
                              dist::Communicator& comm);

}  // namespace hpcnn::bn
