// hpcnn measure: loss and connection sensitivity of a model on labelled data, for prune-rate's
// data-driven thresholds (Sakai et al., "Automatic pruning rate derivation for structured
// pruning of deep neural networks", ICPR 2022, Sec. 3.2; Sakai, Eto, Teranishi, JAIT 13(3), 2022;
// the authors' code: FujitsuResearch/automatic_pruning, auto_prune_cifar10.py).
//
// The model runs as it evaluates (nn::Mode::inference_grad: BatchNormalization with its running
// statistics, no Dropout, no augmentation) on batches b = 0 .. B-1 of `batch_size` consecutive
// samples from the start of the data (the last one smaller when the data end first). For each
// batch, with the gradients cleared before it (the authors' loop never clears them; we take that
// for an oversight and say so in tools/prune-rate/README.md):
//   loss_b      the mean softmax cross-entropy of the batch (no label smoothing); for samples with
//               regression targets, the batch's mean squared error (nn/regression.h)
//   s_{b,p}     sum over the elements i of parameter p of 1 / |dloss_b/dw_i|, where a gradient
//               that is exactly 0 counts as 1e7 (contributing 1e-7), as the authors do
// and the results are the means over the batches:
//   loss = (1/B) sum_b loss_b,    sensitivity[p] = S_p = (1/B) sum_b s_{b,p}.
// Under mpirun, batch b runs on rank b mod W; every per-batch number is gathered in batch order
// (an allreduce where each entry has one non-zero contribution, hence exact) and summed in that
// order on every rank, so the results are bitwise the same for any world size and on every rank.
//
// Errors: ErrorKind::bad_input for data without labels, an image shape the model rejects, a
// label out of range (naming the sample) or a non-finite loss (naming the batch); model errors
// name the node; ErrorKind::usage for batches or batch_size < 1.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "data/augment.h"
#include "data/loader.h"
#include "data/source.h"
#include "dist/communicator.h"

namespace hpcnn::measure {

struct SensitivityOptions {
  int64_t batches = 100;         // B at most (fewer when the data run out); the authors' calc_iter
  int64_t batch_size = 128;      // samples per batch
  data::Augmentation normalise;  // mean/std only (crop and flip are ignored)
};

struct Sensitivity {
  double loss = 0;                            // mean cross-entropy over the batches
  int64_t batches = 0, samples = 0;           // used
  std::map<std::string, double> sensitivity;  // S_p per parameter (initializer) name
  std::map<std::string, int64_t> elements;    // N_p: elements of each parameter
};

// The evaluation-mode loader of the first min(batches * batch_size, size) samples, normalised only,
// started at epoch 0 (also measure/channel_moments.h); with slabs > 1, depth slab `slab` of each
// volume (data/loader.h: the spatial split).
std::unique_ptr<data::BatchLoader> first_batches(const std::shared_ptr<const data::SampleSource>& samples,
                                                 const SensitivityOptions& options, int slab = 0, int slabs = 1);

// `model`: the ONNX model (external data loaded); `origin` names it in errors.
Sensitivity measure_sensitivity(const onnx::ModelProto& model, const std::string& origin,
                                std::shared_ptr<const data::SampleSource> samples, const SensitivityOptions& options,
                                dist::Communicator& comm);

}  // namespace hpcnn::measure
