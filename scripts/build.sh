#!/usr/bin/env bash
# Configures and builds into ./build (CPU-only parts always; CUDA/MPI/NCCL parts when found).
# Extra arguments go to cmake's configure step, e.g. -DHPCNN_WITH_CUDA=OFF.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${HPCNN_BUILD_DIR:-$here/build}"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >&2
cmake --build "$build" -j"$(nproc)" >&2
