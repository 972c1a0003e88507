#!/usr/bin/env bash
# Sets everything up from nothing, builds, and runs the main job on real data: the pipeline
# (scripts/pipeline.sh) on Fashion-MNIST with the VGG-style network. The data set is compressed
# into huffgpu shards; the network is trained under mpirun (2 ranks), pruned by the automatic
# prune / fine-tune loop (prune-rate's data-driven rates), its first FC layer replaced by a
# structured sparse one (sparsify-fcl) and fine-tuned, and its BatchNorm statistics polished
# (bn-polish); every model is evaluated. Each step prints one line; the full reports, the
# commands and their output go to the run folder, which ends with report.md, report.json and plots.
#
#   bash scripts/quickstart.sh                  configs/pipeline_fashion_mnist.json
#   QUICKSTART_FAST=1 bash scripts/quickstart.sh   configs/pipeline_fashion_mnist_fast.json (shortened)
#
# A rerun skips the steps whose outputs are up to date (delete out/pipeline/... to start over).
# The set-up's and the build's output go to out/quickstart/{setup,build}.log, one line each on the
# terminal (their last lines when they fail). Disk space: see the README.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
logs=$here/out/quickstart
mkdir -p "$logs"
quietly() {  # WHAT LOG COMMAND...: runs COMMAND with its output in LOG; one line on the terminal
  local what=$1 log=$2 t=$SECONDS status=0
  shift 2
  echo "quickstart: $what ... (log: $log)" >&2
  "$@" > "$log" 2>&1 || status=$?
  if [ "$status" != 0 ]; then
    echo "quickstart: $what failed with exit status $status; the last lines of $log:" >&2
    tail -n 20 "$log" >&2
    exit "$status"
  fi
  echo "quickstart: $what done in $((SECONDS - t)) s" >&2
}
t0=$SECONDS
quietly "set-up (Debian packages, Python environment)" "$logs/setup.log" bash "$here/scripts/setup.sh" --main-job
t1=$SECONDS
quietly "build" "$logs/build.log" bash "$here/scripts/build.sh" -DHPCNN_BUILD_TESTS=OFF
t2=$SECONDS
cd "$here"
config=configs/pipeline_fashion_mnist.json
[ "${QUICKSTART_FAST:-0}" != 1 ] || config=configs/pipeline_fashion_mnist_fast.json
echo "quickstart: running the pipeline: bash scripts/pipeline.sh $config -q" >&2
bash scripts/pipeline.sh "$config" -q
echo "quickstart: set-up $((t1 - t0)) s, build $((t2 - t1)) s, pipeline $((SECONDS - t2)) s" >&2
