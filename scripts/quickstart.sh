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
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
t0=$SECONDS
bash "$here/scripts/setup.sh"
t1=$SECONDS
bash "$here/scripts/build.sh"
t2=$SECONDS
cd "$here"
config=configs/pipeline_fashion_mnist.json
[ "${QUICKSTART_FAST:-0}" != 1 ] || config=configs/pipeline_fashion_mnist_fast.json
echo "quickstart: running the pipeline: bash scripts/pipeline.sh $config -q" >&2
bash scripts/pipeline.sh "$config" -q
echo "quickstart: set-up $((t1 - t0)) s, build $((t2 - t1)) s, pipeline $((SECONDS - t2)) s" >&2
