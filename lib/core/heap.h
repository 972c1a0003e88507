#pragma once
// Process-wide heap settings for programs that allocate and free the same large buffers over and
// over (a training step's activations and gradients: tens of MiB per step, freed in another order
// each time).
//
// glibc's malloc serves blocks above a moving threshold with mmap and gives the top of the heap back
// to the kernel when more than a threshold is free there; which of the two happens to a step's
// buffers depends on the order of earlier allocations. When the memory goes back, the next step
// faults every page in again (measured: 2.6x the page faults and ~10% of the step time of the
// Fashion-MNIST CNN at one thread). retain_freed_memory() fixes both thresholds (glibc mallopt),
// so that freed buffers stay in the heap for the next step: peak RSS stays what the largest step
// needs, and the memory is returned at exit.
// The training tools link tcmalloc where the build finds it (tools/common/allocator.h), which
// reuses freed blocks of every size; its mallopt does nothing, and this setting matters only to a
// build with glibc's malloc (-DHPCNN_ALLOCATOR=SYSTEM or no libgoogle-perftools-dev).
#include <cstddef>

namespace hpcnn {

// Blocks of at least `mmap_threshold` bytes (default and glibc's largest: 32 MiB) are still mapped
// on their own; the heap is trimmed only when more than `trim_threshold` bytes (default 512 MiB)
// are free at its top. Elsewhere than glibc it does nothing.
void retain_freed_memory(size_t mmap_threshold = size_t{32} << 20, size_t trim_threshold = size_t{512} << 20);

}  // namespace hpcnn
