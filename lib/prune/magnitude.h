// hpcnn prune: unstructured magnitude pruning (Han et al., "Learning both weights and connections
// for efficient neural networks", NeurIPS 2015, section 3): in every Conv and Gemm weight, the
// fraction `rate` of its entries smallest in magnitude become exactly zero; shapes stay, so the
// model computes dense. Per tensor: each weight loses floor(rate * numel) entries (ties broken
// by the lower flat index), so the zero count of a weight without zeros is exact; entries that
// were zero already count among the smallest. The zeros are the fixed mask of dist-train's
// compact optimizer state (`sparse` key, or `mask` naming the pruned model; issue 45).
//
// Weights: FLOAT initializers (external data loaded by onnxu::load_model) or Constant nodes'
// values, input 1 of a Conv / Gemm node; a weight that several nodes read is pruned once.
// Errors: ErrorKind::usage for a rate outside [0, 1) or not finite; ErrorKind::unsupported for a
// weight that is not a FLOAT constant (naming the node and the weight); ErrorKind::bad_input
// when the model has no Conv or Gemm weight.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace hpcnn::prune {

struct MagnitudeLayer {
  std::string node;    // the first Conv / Gemm node reading the weight
  std::string weight;  // the weight's name
  int64_t elements = 0;
  int64_t zeros = 0;  // after pruning: max(floor(rate * elements), zeros before)
};

std::vector<MagnitudeLayer> magnitude_prune(onnx::ModelProto& model, double rate);

}  // namespace hpcnn::prune
