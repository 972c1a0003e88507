// hpcnn tools: a progress bar on stderr, drawn only when Context::progress (a terminal, not -q,
// rank 0): "epoch 3/15 [#########.....] 120/468 loss 0.4123".
#pragma once

#include <cstdint>
#include <string>

namespace hpcnn::tool {

class ProgressBar {
 public:
  // `label` e.g. "epoch 3/15"; `total` steps.
  ProgressBar(bool enabled, std::string label, int64_t total);
  // Redraws every 5 steps and at the end; `loss` is shown when >= 0.
  void update(int64_t done, double loss = -1);

 private:
  bool enabled_;
  std::string label_;
  int64_t total_;
};

}  // namespace hpcnn::tool
