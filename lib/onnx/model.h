// hpcnn onnx: loading and saving ONNX models (protobuf, libonnx-dev's onnx_proto).
//
// load_model() parses the file (any IR version; the default-domain opset must be 7 or newer),
// validates the graph (see GraphView) and reads tensors stored as external data into raw_data,
// resolving locations relative to the model's folder (absolute paths and ".." refused).
// save_model() writes atomically; tensors go to an external data file "<output>.data" beside
// the model when asked, when the input had external data, or when the model would exceed
// protobuf's 2 GiB limit. IR version, opset imports, metadata and unknown fields are preserved.
// Errors: ErrorKind::io (cannot open/write), bad_input (not a model, truncated, bad external
// data reference), unsupported (opset older than 7), each naming the file and tensor.
#pragma once

#include <onnx/onnx_pb.h>

#include <filesystem>
#include <string>
#include <vector>

namespace hpcnn::onnxu {

inline constexpr int64_t kMinOpset = 7;
inline constexpr int64_t kMaxTestedOpset = 21;

struct Model {
  onnx::ModelProto proto;
  std::filesystem::path path;  // where it was read from
  bool had_external_data = false;
  std::vector<std::filesystem::path> external_files;  // the external data files read (weakly canonical)
};

Model load_model(const std::filesystem::path& path);

// Identity nodes that only forward an initializer are replaced by load_model() with an initializer
// of their output's name holding a copy: PyTorch's TorchScript exporter merges equal tensors (a
// fresh BatchNorm's scale and running_var are all ones, its bias and running_mean all zeros) and
// reads the merged one through Identity nodes, so that without this the tools would see no
// BatchNorm statistics (bn-polish: nothing to update; dist-train: a running_var trained as the
// scale). The models the tools write have no such node. Left alone: an Identity whose output is a
// graph output, and every node of a graph with subgraphs. Returns the number of nodes replaced.
int bypass_initializer_identities(onnx::ModelProto& model);

enum class ExternalData { automatic, always, never };

struct SaveOptions {
  ExternalData external_data = ExternalData::automatic;
  size_t external_min_bytes = 1024;  // tensors smaller than this stay inside the model
  bool overwrite = true;
  // Files the written model and its data file must not replace (the input's external data):
  // ErrorKind::usage naming the file.
  std::vector<std::filesystem::path> protected_files;
};

// The save options of a tool's output model: `requested` (the --external-data flag), where
// automatic becomes always when the input model had external data.
SaveOptions output_save_options(const Model& input, ExternalData requested, bool overwrite);

// `model` is left as it was (tensors moved out to the data file are moved back).
void save_model(onnx::ModelProto& model, const std::filesystem::path& path, const SaveOptions& options = {});

// Opset version of the default ("" or "ai.onnx") domain; 0 if the model imports none.
int64_t default_opset(const onnx::ModelProto& model);

}  // namespace hpcnn::onnxu
