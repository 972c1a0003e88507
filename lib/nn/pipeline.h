// hpcnn nn: inter-layer (pipeline) parallelism: the ONNX graph cut into P contiguous stages, one
// per group of ranks (GPipe, Huang et al., NeurIPS 2019; AxoNN's inter-layer parallelism, Singh &
// Bhatele, IPDPS 2023, Sec. III). train/pipeline_schedule.h runs the stages and moves the tensors.
//
// split_pipeline() cuts the graph's nodes, in topological order, into P non-empty contiguous
// ranges. Cut c (between stage c-1 and stage c) is crossed by every value that a node before the
// cut (or the graph input) produces and a node after it (or a graph output) reads: residual
// branches and other skip connections included, so a value may cross several cuts, and a stage
// passes on what it only forwards (an Identity node inside the stage). Each stage is a valid
// ONNX model:
//   inputs   the values crossing the cut before it (stage 0: the graph input), in a fixed order
//            (the graph input first, then by producing node);
//   outputs  the values crossing the cut after it, same order (the last stage: the graph's
//            outputs, the logits or predictions first);
//   nodes    its range, plus a copy of each Constant node it reads; the initializers its nodes
//            read (so parameters keep their names; a parameter read in two stages is refused).
// Every crossing value must be an activation [N, ...] whose per-sample dims are known from shape
// inference (fp32 activations: shape tensors and other 1-D values cannot cross); automatic cuts
// avoid the places where one would, named cuts there are refused.
//
// Where the cuts go:
//   by cost (cuts empty): the stages' multiply-accumulates (onnx/costs.h node_macs: Conv, Gemm,
//     MatMul with constant weights, per sample; estimated, not measured) are balanced: the cuts
//     minimise the largest stage's MACs, ties broken by the fewest bytes crossing the cuts.
//   at named tensors (P - 1 names): the cut follows the node that produces each named value.
// Errors (ErrorKind::usage, before any data is read; naming the model, the stage, the value):
//   P < 1; P larger than the model's nodes (Constant nodes not counted); a named cut value that
//   the graph does not have, or that no node produces (a graph input or an initializer); named
//   cuts out of graph order, or at the same place, or after the last node (a stage left empty);
//   a value crossing a cut that is not an activation with known per-sample dims.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hpcnn::nn {

struct CrossingValue {
  std::string name;
  std::vector<int64_t> sample_dims;  // per-sample dims (the batch dim left out)
  int64_t sample_elements() const;
};

struct PipelineStage {
  onnx::ModelProto model;               // inputs = `inputs` (names as in the whole graph)
  std::vector<CrossingValue> inputs;    // received from the previous stage (stage 0: the graph input)
  std::vector<CrossingValue> outputs;   // sent to the next stage (last: the graph outputs)
  std::vector<std::string> output_values;  // the model's graph output for each of `outputs`
  std::string first_node, last_node;    // names (or "node #i (Op)") of its range
  int nodes = 0;                        // nodes of its range
  int64_t macs = 0;                     // per sample (onnx/costs.h node_macs)
};

struct PipelineSplit {
  std::vector<PipelineStage> stages;
  bool named = false;  // cuts at named tensors (true) or balanced by MACs
  // Bytes per sample that cross cut c (between stage c and c + 1) forward; backward the same
  // count travels back as gradients.
  uint64_t cut_bytes_per_sample(size_t cut) const;
};

PipelineSplit split_pipeline(const onnx::ModelProto& model, const std::string& origin, int stages,
                             const std::vector<std::string>& cuts = {});

}  // namespace hpcnn::nn
