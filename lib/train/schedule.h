// hpcnn train: learning-rate schedule of the large-batch recipe (Goyal et al., "Accurate,
// large minibatch SGD", 2017): the base rate scaled with the global batch, a linear warm-up,
// then cosine or polynomial decay to a final rate, evaluated per optimizer step.
//   peak = base * scale, scale = global_batch / base_batch (linear), sqrt of it (sqrt) or 1 (none)
//   step < warmup: lr = peak * (warmup_start + (1 - warmup_start) * (step + 1) / warmup)
//   after: t = (step - warmup) / (total - warmup) in [0, 1];
//          cosine: final + (peak - final) * (1 + cos(pi t)) / 2
//          polynomial: final + (peak - final) * (1 - t)^power;  constant: peak
#pragma once

#include <cstdint>
#include <string>

namespace hpcnn::train {

struct LrSchedule {
  double base = 0.1;
  int64_t base_batch = 256;
  std::string scaling = "linear";   // linear | sqrt | none
  double warmup_epochs = 0;
  double warmup_start = 0.0;        // fraction of the peak at the first step
  std::string decay = "cosine";     // cosine | polynomial | constant
  double power = 2.0;
  double final_lr = 0.0;

  double peak(int64_t global_batch) const;
  // lr at optimizer step `step` of `total_steps` (steps_per_epoch * epochs).
  double at(int64_t step, int64_t total_steps, int64_t steps_per_epoch, int64_t global_batch) const;
  void validate() const;  // ErrorKind::usage naming the key
};

}  // namespace hpcnn::train
