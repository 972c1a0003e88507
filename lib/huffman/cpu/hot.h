// hpcnn huffman: code generation for the CPU codec's inner loops.
//
// Variable shifts dominate Huffman packing and unpacking; x86-64's BMI2 (shlx/shrx, Haswell and
// newer) frees them from the CL register. HPCNN_HOT_TARGET compiles a function for the baseline
// and for BMI2 and picks one at load time (GCC function multiversioning), so the build stays
// portable.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define HPCNN_HOT_TARGET __attribute__((target_clones("default", "bmi2")))
#else
#define HPCNN_HOT_TARGET
#endif

// OpenMP when the compiler has it (the fuzz builds compile without it).
#if defined(_OPENMP)
#include <omp.h>
#else
inline int omp_get_thread_num() { return 0; }
#endif
