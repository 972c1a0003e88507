// hpcnn core: xxHash (libxxhash-dev). Normally linked against Debian's libxxhash, whose x86
// dispatch entry points pick the AVX2/AVX-512 XXH3 at run time; the codec-only build
// (HPCNN_XXHASH_HEADER_ONLY, for machines without the -dev packages) compiles it inline instead.
#pragma once

#if defined(HPCNN_XXHASH_HEADER_ONLY)
#define XXH_INLINE_ALL
#include <xxhash.h>
#else
#include <xxh_x86dispatch.h>
#include <xxhash.h>
#endif
