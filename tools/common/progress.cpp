#include "common/progress.h"

#include <cstdio>

namespace hpcnn::tool {

ProgressBar::ProgressBar(bool enabled, std::string label, int64_t total)
    : enabled_(enabled), label_(std::move(label)), total_(total) {}

void ProgressBar::update(int64_t done, double loss) {
  if (!enabled_ || (done % 5 && done != total_)) return;
  const int width = 30;
  const int filled = total_ ? static_cast<int>(width * done / total_) : width;
  std::fprintf(stderr, "\r%s [%s%s] %lld/%lld", label_.c_str(), std::string(filled, '#').c_str(),
               std::string(width - filled, '.').c_str(), static_cast<long long>(done), static_cast<long long>(total_));
  if (loss >= 0) std::fprintf(stderr, " loss %.4f", loss);
  if (done == total_) std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace hpcnn::tool
