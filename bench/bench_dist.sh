#!/usr/bin/env bash
# dist-train benchmark: training images/s of the Fashion-MNIST CNN config with 1 and 2 ranks
# (one thread each) and the scaling efficiency; bytes exchanged per step and step time, dense vs
# sparse, for the same CNN with 90% of its weights zeroed (Singh & Bhatele, arXiv 2302.05045).
# Usage: bench/bench_dist.sh [STEPS]   (STEPS optimizer steps per measurement, default 150)
# Needs a build (scripts/build.sh) and the .venv (scripts/setup.sh). Prints a table.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
# shellcheck source=scripts/tools.sh
. scripts/tools.sh
steps=${1:-150}
bin=${BUILD_DIR:-build}/tools/dist-train/dist-train
py=.venv/bin/python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
$py scripts/make_train_models.py "$out" > /dev/null
# The 90%-sparse variant: zero the 90% smallest-magnitude weights of every tensor of rank >= 2.
$py - "$out" <<'PY'
import sys, numpy as np, onnx
from onnx import numpy_helper
d = sys.argv[1]
m = onnx.load(f"{d}/fashion_mnist_cnn.onnx")
for t in m.graph.initializer:
    if len(t.dims) >= 2:
        a = numpy_helper.to_array(t).copy()
        a[np.abs(a) < np.quantile(np.abs(a), 0.9)] = 0
        t.CopyFrom(numpy_helper.from_array(a, t.name))
onnx.save(m, f"{d}/cnn_sparse90.onnx")
PY
common=(--config configs/fashion_mnist_cnn.json --epochs 1 --set final_polish_epochs=0 --set max_steps_per_epoch=$steps
        --set 'data.test_images=""' --set 'checkpoint.path=""' --set 'metrics=""' --set 'output=""' --threads 1 -q)
run() {  # ranks, extra args... -> summary JSON
  local n=$1; shift
  hpcnn_launch "$n"  # scripts/tools.sh: mpirun for 2 ranks and more
  OMP_NUM_THREADS=1 "${HPCNN_LAUNCH[@]}" "$bin" "${common[@]}" "$@"
}
field() { $py -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
cnn="--model=$out/fashion_mnist_cnn.onnx"
r1=$(run 1 "$cnn"); r2=$(run 2 "$cnn")
i1=$(echo "$r1" | field train_images_per_second); i2=$(echo "$r2" | field train_images_per_second)
sd=$(run 2 "--model=$out/cnn_sparse90.onnx"); ss=$(run 2 "--model=$out/cnn_sparse90.onnx" --set sparse=true)
$py - "$i1" "$i2" "$sd" "$ss" "$steps" <<'PY'
import json, sys
i1, i2 = float(sys.argv[1]), float(sys.argv[2])
d, s = json.loads(sys.argv[3].strip().splitlines()[-1]), json.loads(sys.argv[4].strip().splitlines()[-1])
steps = int(sys.argv[5])
print(f"Fashion-MNIST CNN, batch 64 per rank, {steps} steps, 1 thread per rank")
print(f"  1 rank : {i1:8.0f} images/s")
print(f"  2 ranks: {i2:8.0f} images/s   scaling efficiency {i2 / (2 * i1):.2f}")
print("CNN with 90% zero weights, 2 ranks:")
for name, r in (("dense ", d), ("sparse", s)):
    print(f"  {name}: {r['bytes_exchanged_per_step']:9d} bytes/step, step time {1000 * r['global_batch'] / r['train_images_per_second']:.1f} ms")
ratio = s["bytes_exchanged_per_step"] / d["bytes_exchanged_per_step"]
print(f"  sparse/dense bytes: {100 * ratio:.1f}%  (goal <= 15%: {'met' if ratio <= 0.15 else 'NOT met'})")
PY
