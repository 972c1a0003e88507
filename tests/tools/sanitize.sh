#!/usr/bin/env bash
# Builds the project with AddressSanitizer and UndefinedBehaviorSanitizer (gcc) into
# build-sanitize/ and runs the unit-test program under them. Any report fails the run.
# (The other unit-labelled test, layering, reads sources and the normal build's tools.)
# usage: tests/tools/sanitize.sh [extra cmake arguments]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build="${HPCNN_SANITIZE_DIR:-$here/build-sanitize}"
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_CXX_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" -DHPCNN_WITH_CUDA=OFF \
  -DHPCNN_ALLOCATOR=SYSTEM "$@" >&2  # AddressSanitizer brings its own malloc: no tcmalloc in the tools
cmake --build "$build" -j"$(nproc)" --target unit_tests >&2
cd "$build"
# OpenMP's runtime keeps its thread pool alive at exit: not a leak of ours.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" LSAN_OPTIONS="suppressions=$here/tests/tools/lsan.supp"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest -R '^unit_tests$' --output-on-failure
