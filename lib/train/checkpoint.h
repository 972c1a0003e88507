// hpcnn train: dist-train checkpoints: the model (an ONNX ModelProto with the current
// parameters and BatchNormalization statistics), the optimizer state and the position in
// training, in one file written atomically.
//
// Layout (little-endian): "HPCNNCKP" | u32 version (1) | u64 JSON length | JSON | blobs.
// The JSON holds epoch, step_in_epoch, global_step, world_size, batch_size, model_file and
// output (absolute paths of the configuration's model and output model when written; absent in
// checkpoints of older versions) and, for each blob,
// name, byte offset (from the start of the blob area) and size. Blobs: "model" (serialized
// ModelProto) and one "state:<parameter>" per parameter: its optimizer velocity as dense fp32
// (zeros where a sparse layout keeps no state). A checkpoint taken with another world size
// resumes at the start of its epoch when it was written mid-epoch (the per-rank shards differ).
// Errors: ErrorKind::bad_input naming the file and offset for truncated or corrupt files.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace hpcnn::train {

struct Checkpoint {
  int64_t epoch = 0;          // epoch in progress (0-based); equals epochs when training ended
  int64_t step_in_epoch = 0;  // optimizer steps already done in that epoch
  int64_t global_step = 0;    // optimizer steps done in all
  int64_t world_size = 1;
  int64_t batch_size = 0;  // per rank
  std::string model_file;  // the model file the run was started with ("" when not recorded)
  std::string output;      // the output model of the run that wrote it ("" when none or not recorded)
  onnx::ModelProto model;
  std::map<std::string, Tensor> optimizer_state;  // by parameter name, dense shapes
};

void write_checkpoint(const std::string& path, const Checkpoint& ckpt);
Checkpoint read_checkpoint(const std::string& path);
// The header only (position, model_file, output): reads the JSON header, not the model or the
// optimizer state. Errors as read_checkpoint's.
Checkpoint read_checkpoint_header(const std::string& path);

}  // namespace hpcnn::train
