#!/usr/bin/env bash
# dist-train masked pipeline messages (issue 45, item 3's last sentence and item 5): ResNet-20
# (Fashion-MNIST) channel-masked by prune-rate --rate R --mask-channels (R = 0.5: half of every
# prunable group's channels kept; R = 0.75: a quarter), P = 2 stages balanced by MACs, GPipe, m = 4,
# batch 32, one thread per rank: stage-to-stage bytes per step (measured and closed form) and the
# step time, dense messages against masked ones (parallel.pipeline_masked_channels) on the same
# masked model; the unmasked model's dense run as the baseline. Step times: the fastest of 3 runs.
# Usage: bench/bench_pipeline_masked.sh [STEPS]   (optimizer steps per measurement, default 20)
# Needs a build (scripts/build.sh) and the .venv (scripts/setup.sh). Prints a table.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
# shellcheck source=scripts/tools.sh
. scripts/tools.sh
steps=${1:-20}
build=${BUILD_DIR:-build}
bin=$build/tools/dist-train/dist-train
py=.venv/bin/python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
$py scripts/make_train_models.py "$out" > /dev/null
for r in 0.5 0.75; do
  "$build/tools/prune-rate/prune-rate" "$out/fashion_mnist_resnet.onnx" --rate "$r" --mask-channels -o "$out/masked$r.onnx" -q > /dev/null
done
common=(--config configs/fashion_mnist_resnet.json --epochs 1 --batch-size 32 --threads 1
        --set final_polish_epochs=0 --set "max_steps_per_epoch=$steps" --set 'data.test_images=""' --set 'checkpoint.path=""'
        --set 'metrics=""' --set 'output=""' -q --pipeline-stages 2 --micro-batches 4)
run() {  # model, extra args... -> summary JSON
  local m=$1; shift
  hpcnn_launch 2
  OMP_NUM_THREADS=1 "${HPCNN_LAUNCH[@]}" "$bin" "${common[@]}" "--model=$m" "$@"
}
echo "| model | messages | bytes/step measured | closed form | of dense | step s (best of 3) | stage step s 0, 1 (that run) |"
echo "|---|---|---|---|---|---|---|"
row() {  # label, messages, model, args... (3 runs: the bytes of the first, the fastest step time)
  local label=$1 kind=$2; shift 2
  local a b c
  a=$(run "$@"); b=$(run "$@"); c=$(run "$@")
  $py - "$label" "$kind" "$a" "$b" "$c" <<'PY'
import json, sys
runs = [json.loads(x.strip().splitlines()[-1]) for x in sys.argv[3:]]
s = runs[0]
dense = 2 * 32 * 50176  # relu_33.out + conv_34.out, 50176 bytes per sample unmasked (docs/pipeline-parallelism.md)
b = int(s["pipeline_bytes_per_step"])
assert all(int(r["pipeline_bytes_per_step"]) == b for r in runs)
step = min(r["global_batch"] / r["train_images_per_second"] for r in runs)
best = min(runs, key=lambda r: r["global_batch"] / r["train_images_per_second"])
st = ", ".join(f"{x:.3f}" for x in best["pipeline_step_seconds"])
print(f"| {sys.argv[1]} | {sys.argv[2]} | {b} | {s['pipeline_bytes_per_step_closed_form']} | {b / dense:.3f} | {step:.3f} | {st} |")
PY
}
row "ResNet-20" dense "$out/fashion_mnist_resnet.onnx"
for r in 0.5 0.75; do
  row "masked --rate $r" dense "$out/masked$r.onnx"
  row "masked --rate $r" masked "$out/masked$r.onnx" --pipeline-masked-channels
done
