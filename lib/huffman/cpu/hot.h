// hpcnn huffman: code generation for the CPU codec's inner loops.
//
// Variable shifts dominate Huffman packing and unpacking; x86-64's BMI2 (shlx/shrx, Haswell and
// newer) frees them from the CL register. HPCNN_HOT_TARGET compiles a function for the baseline
// and for BMI2 and picks one at load time (GCC function multiversioning), so the build stays
// portable. ThreadSanitizer builds go without (the clones' resolvers run before its runtime is up
// and crash the program at load).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && !defined(__SANITIZE_THREAD__)
#define HPCNN_HOT_TARGET __attribute__((target_clones("default", "bmi2")))
// Streaming loops that GCC vectorizes (byte swaps): a clone for AVX2 beside the baseline.
#define HPCNN_VECTOR_TARGET __attribute__((target_clones("default", "avx2")))
// The same with a third clone for x86-64-v4 (AVX-512: the encoder's in-place word swap, 64 bytes a step).
#define HPCNN_WIDE_VECTOR_TARGET __attribute__((target_clones("default", "avx2", "arch=x86-64-v4")))
#else
#define HPCNN_HOT_TARGET
#define HPCNN_VECTOR_TARGET
#define HPCNN_WIDE_VECTOR_TARGET
#endif

// GCC's SLP vectorizer packs the lanes' output pointers of the interleaved decoder into
// SSE registers, which costs more than it saves there; the decoder's lane loops opt out.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define HPCNN_NO_SLP __attribute__((optimize("no-tree-slp-vectorize")))
#else
#define HPCNN_NO_SLP
#endif

// OpenMP when the compiler has it (the fuzz builds compile without it: then a parallel region
// runs once, on "thread 0", so the codec must plan for one thread).
#if defined(_OPENMP)
#include <omp.h>
inline int codec_threads(int requested) { return requested < 1 ? 1 : requested; }
#else
inline int omp_get_thread_num() { return 0; }
inline int codec_threads(int) { return 1; }
#endif
