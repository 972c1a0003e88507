// hpcnn fcl: the sparsify-fcl job: replaces the first fully connected layer after the last
// convolution with a structured sparse one (Matsumura, Ito, Nakano, Kasagi, Tabaru, "A novel
// structured sparse fully connected layer in convolutional neural networks", CCPE 2021,
// doi 10.1002/cpe.6213). We could not read the paper's full text: the layer shapes below are our
// reading of its arithmetic (tools/sparsify-fcl/README.md).
//
// The pattern: X [N, C, H, W] or, for 3-D convolutions (CosmoFlow), [N, C, D, H, W] (produced by a
// Conv, through BatchNormalization / activations / pooling) -> Flatten (axis 1) or Reshape to
// [N, C*P] -> (Dropout / Identity)* -> Gemm (transA 0) or MatMul with a constant FLOAT weight of
// C*P inputs and O outputs, P = H*W (D*H*W) positions. The last such pattern in topological order
// is taken, or the one whose FC node is named by `layer`.
// The rewrite, in standard ONNX operators (any runtime runs the result):
//   channel: X -> Conv 1x1 (1x1x1) (C -> c', weight [c', C, 1, 1(, 1)], bias [c']) -> Flatten/Reshape
//            (a target naming C*P becomes c'*P) -> ... -> the FC with weight [O, c'*P]
//   spatial: X -> Conv HxW (DxHxW) with group C (C -> C*k, weight [C*k, 1, (D,) H, W], bias [C*k])
//            -> Flatten/Reshape ([N, C*k]) -> ... -> the FC with weight [O, C*k]
// initialised from the dense weight (fcl/factorize.h, with HW = P). Every other node, initializer and
// attribute stays as it was (as protobuf messages); the FC's weight keeps its name and layout
// (transB as before); the new nodes' and initializers' names are fresh; value_info entries of the
// values whose shapes change are dropped.
//
// Errors: ErrorKind::unsupported when no pattern is found (or the named layer is not one,
// saying why);
// ErrorKind::usage for a rank outside [1, C) ([1, P) spatial) unless allow_full_rank, or a
// compression no rank reaches; model errors as onnx/model.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "fcl/factorize.h"
#include "onnx/model.h"

namespace hpcnn::fcl {

enum class Structure { channel, spatial };

struct SparsifyOptions {
  std::filesystem::path model;
  std::optional<std::filesystem::path> output;
  std::optional<int64_t> channels;    // c' (channel structure)
  std::optional<double> compression;  // dense layer parameters / replacement parameters (> 1)
  std::optional<std::string> layer;   // the FC node's name (or its output's)
  Structure structure = Structure::channel;
  std::optional<int64_t> spatial_width;  // k outputs per channel (spatial structure)
  Init init = Init::svd;
  // Init::data: called once the layer is found, with the name of its 4-D or 5-D input value and its channel
  // count; returns the channels' second moment [C, C] (measure/channel_moments.h; the tool wires it,
  // so that fcl needs no engine) and a JSON description for the report.
  std::function<std::pair<std::vector<double>, nlohmann::ordered_json>(const std::string& value, int64_t channels)> input_moment;
  uint64_t seed = 1;  // random init
  bool allow_full_rank = false;
  onnxu::ExternalData external_data = onnxu::ExternalData::automatic;
  bool overwrite = false;
};

// Checks the option combination. ErrorKind::usage.
void validate_options(const SparsifyOptions& options);

// Runs the job; returns the report (fields in tools/sparsify-fcl/README.md).
nlohmann::ordered_json run_sparsify(const SparsifyOptions& options);

}  // namespace hpcnn::fcl
