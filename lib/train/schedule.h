// hpcnn train: learning-rate schedule of the large-batch recipe (Goyal et al., "Accurate,
// large minibatch SGD", 2017): the base rate scaled with the global batch, a linear warm-up,
// then cosine or polynomial decay to a final rate, evaluated per optimizer step.
//
// The schedule is a function of the training progress in epochs, not of a step count, so that
// a run resumed with another batch size or number of ranks (hence another number of steps per
// epoch) continues where the fraction of training done left it. The optimizer step `step`
// (0-based) of epoch `epoch` (0-based) with S steps per epoch sits at position
//   x = epoch + step / S   (epochs of training done before the step), of E epochs in all;
//   peak = base * scale, scale = global_batch / base_batch (linear), sqrt of it (sqrt) or 1 (none)
//   x < W (warm-up, W = warmup_epochs): lr = peak * (warmup_start + (1 - warmup_start) * (x + 1/S) / W)
//   after: t = (x - W) / (E - W) clamped to [0, 1];
//          cosine: final + (peak - final) * (1 + cos(pi t)) / 2
//          polynomial: final + (peak - final) * (1 - t)^power;  constant: peak
//          step: peak * step_factors[i] from epoch step_epochs[i] on (the last milestone reached;
//                peak before the first), the MLPerf HPC CosmoFlow reference's schedule
//                (x0.25 from epoch 32, x0.125 from 64: step_epochs [32, 64], step_factors [0.25, 0.125])
// With W * S a whole number of steps this is the step-count form (step + 1) / (W * S) of the
// warm-up and (global_step - W * S) / ((E - W) * S) of the decay.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpcnn::train {

struct LrSchedule {
  double base = 0.1;
  int64_t base_batch = 256;
  std::string scaling = "linear";  // linear | sqrt | none
  double warmup_epochs = 0;
  double warmup_start = 0.0;     // fraction of the peak at the first step
  std::string decay = "cosine";  // cosine | polynomial | constant | step
  double power = 2.0;
  double final_lr = 0.0;
  std::vector<double> step_epochs;   // decay step: increasing milestones, in epochs (x as above)
  std::vector<double> step_factors;  // decay step: the peak's multiplier from each milestone on

  double peak(int64_t global_batch) const;
  // lr of optimizer step `step` of epoch `epoch` (both 0-based), with `steps_per_epoch` steps
  // per epoch and `epochs` epochs in all.
  double at(int64_t epoch, int64_t step, int64_t steps_per_epoch, int64_t epochs, int64_t global_batch) const;
  void validate() const;  // ErrorKind::usage naming the key
};

}  // namespace hpcnn::train
