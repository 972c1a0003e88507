#include "core/heap.h"

#include <malloc.h>

#include <climits>

namespace hpcnn {

void retain_freed_memory(size_t mmap_threshold, size_t trim_threshold) {
#if defined(__GLIBC__)
  auto clamp = [](size_t v) { return static_cast<int>(v > INT_MAX ? INT_MAX : v); };
  ::mallopt(M_MMAP_THRESHOLD, clamp(mmap_threshold));
  ::mallopt(M_TRIM_THRESHOLD, clamp(trim_threshold));
#else
  (void)mmap_threshold;
  (void)trim_threshold;
#endif
}

}  // namespace hpcnn
