// hpcnn tools: the memory allocator linked into the tools that train and measure models.
//
// dist-train, bn-polish, prune-rate, sparsify-fcl and bench/train_bench link gperftools' tcmalloc
// (libtcmalloc_minimal, Debian's libgoogle-perftools-dev) when the build finds it (CMake option
// HPCNN_ALLOCATOR: AUTO, TCMALLOC, SYSTEM). A training step frees and allocates the same large
// tensors every step: glibc's malloc serves those over 32 MiB with fresh mmap'ed pages (a page
// fault per 4 KiB, every step: 31% of a CosmoFlow-32^3 step at batch 16 was the kernel's) and keeps
// the medium ones in a heap it seldom returns; tcmalloc reuses both. Measured in
// studies/cosmoflow/README.md ("The allocator").
#pragma once

#include <string>

namespace hpcnn::tool {

// "tcmalloc MAJOR.MINOR" when the tool was linked with tcmalloc and malloc is tcmalloc's,
// "another malloc than the linked tcmalloc MAJOR.MINOR" when an allocator was preloaded over it,
// "glibc malloc" in a build without tcmalloc (where a preloaded one goes unnoticed).
std::string allocator_name();

}  // namespace hpcnn::tool
