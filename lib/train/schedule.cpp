#include "train/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace hpcnn::train {

double LrSchedule::peak(int64_t global_batch) const {
  const double r = static_cast<double>(global_batch) / static_cast<double>(base_batch);
  if (scaling == "linear") return base * r;
  if (scaling == "sqrt") return base * std::sqrt(r);
  return base;
}

double LrSchedule::at(int64_t epoch, int64_t step, int64_t steps_per_epoch, int64_t epochs, int64_t global_batch) const {
  const double p = peak(global_batch);
  const double s = static_cast<double>(std::max<int64_t>(steps_per_epoch, 1));
  const double x = static_cast<double>(epoch) + static_cast<double>(step) / s;  // epochs done before this step
  const double w = warmup_epochs, e = static_cast<double>(epochs);
  if (x < w) return p * (warmup_start + (1.0 - warmup_start) * std::min(1.0, (x + 1.0 / s) / w));
  if (decay == "step") {
    double f = 1.0;
    for (size_t i = 0; i < step_epochs.size(); ++i)
      if (x >= step_epochs[i]) f = step_factors[i];
    return p * f;
  }
  if (decay == "constant" || e <= w) return p;
  const double t = std::clamp((x - w) / (e - w), 0.0, 1.0);
  if (decay == "cosine") return final_lr + (p - final_lr) * (1.0 + std::cos(std::numbers::pi * t)) / 2.0;
  return final_lr + (p - final_lr) * std::pow(1.0 - t, power);
}

void LrSchedule::validate() const {
  if (!(base > 0)) throw_error(ErrorKind::usage, "lr.base must be > 0");
  if (base_batch <= 0) throw_error(ErrorKind::usage, "lr.base_batch must be > 0");
  if (scaling != "linear" && scaling != "sqrt" && scaling != "none")
    throw_error(ErrorKind::usage, "lr.scaling '" + scaling + "' is not one of: linear, sqrt, none");
  if (decay != "cosine" && decay != "polynomial" && decay != "constant" && decay != "step")
    throw_error(ErrorKind::usage, "lr.decay '" + decay + "' is not one of: cosine, polynomial, constant, step");
  if (step_epochs.size() != step_factors.size())
    throw_error(ErrorKind::usage, "lr.step_epochs has " + std::to_string(step_epochs.size()) + " milestones, lr.step_factors " +
                                      std::to_string(step_factors.size()) + " factors (give one factor per milestone)");
  if (decay == "step" && step_epochs.empty())
    throw_error(ErrorKind::usage, "lr.decay step needs lr.step_epochs and lr.step_factors (e.g. [32, 64] and [0.25, 0.125])");
  for (size_t i = 0; i < step_epochs.size(); ++i) {
    if (!(step_epochs[i] >= 0) || (i > 0 && !(step_epochs[i] > step_epochs[i - 1])))
      throw_error(ErrorKind::usage, "lr.step_epochs must be increasing epochs >= 0");
    if (!(step_factors[i] > 0) || !std::isfinite(step_factors[i]))
      throw_error(ErrorKind::usage, "lr.step_factors must be > 0");
  }
  if (warmup_epochs < 0) throw_error(ErrorKind::usage, "lr.warmup_epochs must be >= 0");
  if (warmup_start < 0 || warmup_start > 1) throw_error(ErrorKind::usage, "lr.warmup_start must be in [0, 1]");
  if (final_lr < 0) throw_error(ErrorKind::usage, "lr.final must be >= 0");
  if (!(power > 0)) throw_error(ErrorKind::usage, "lr.power must be > 0");
}

}  // namespace hpcnn::train
