#!/usr/bin/env bash
# dist-train pipeline benchmark (issue 45): ResNet-20 (Fashion-MNIST, 0.27 M parameters: its
# activations, not its weights, dominate) with batch 32 per replica, one thread per rank:
#   - 1 rank (1 and 2 threads) against P = 2 stages on 2 ranks (GPipe, m = 4): step time;
#   - P = 2, GPipe and 1F1B, m = 2, 4, 8: each stage's idle fraction (time waiting for the other
#     stage / its step time) against the closed form (P-1)/(m+P-1), stage-to-stage bytes per step
#     (measured and closed form), and the peak bytes of stage inputs kept for the backward
#     (the activation memory that differs between the orders) and each rank's peak RSS.
# Usage: bench/bench_pipeline.sh [STEPS]   (optimizer steps per measurement, default 20)
# Needs a build (scripts/build.sh) and the .venv (scripts/setup.sh). Prints a table.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
# shellcheck source=scripts/tools.sh
. scripts/tools.sh
steps=${1:-20}
bin=${BUILD_DIR:-build}/tools/dist-train/dist-train
py=.venv/bin/python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
$py scripts/make_train_models.py "$out" > /dev/null
common=(--config configs/fashion_mnist_resnet.json "--model=$out/fashion_mnist_resnet.onnx" --epochs 1 --batch-size 32
        --set final_polish_epochs=0 --set max_steps_per_epoch=$steps --set 'data.test_images=""' --set 'checkpoint.path=""'
        --set 'metrics=""' --set 'output=""' -q)
run() {  # ranks, threads, extra args... -> summary JSON (and each rank's peak RSS in $out/rss)
  local n=$1 t=$2; shift 2
  hpcnn_launch "$n"
  OMP_NUM_THREADS=$t "${HPCNN_LAUNCH[@]}" /usr/bin/time -a -o "$out/rss" -f "%M" "$bin" "${common[@]}" --threads "$t" "$@"
}
field() { $py -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
step_time() {  # summary JSON -> seconds per step
  $py -c "import json,sys; s=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(f\"{s['global_batch'] / s['train_images_per_second']:.4f}\")"
}
best() {  # the fastest of 3 runs (a shared machine's noise only slows runs down): ranks, threads, args...
  local a b c
  a=$(run "$@" | step_time); b=$(run "$@" | step_time); c=$(run "$@" | step_time)
  printf '%s\n' "$a" "$b" "$c" | sort -g | head -1
}
: > "$out/rss"
one1=$(best 1 1); one2=$(best 1 2)
echo "| run | step s (best of 3) |"
echo "|---|---|"
echo "| 1 rank, 1 thread | $one1 |"
echo "| 1 rank, 2 threads | $one2 |"
pipe=$(best 2 1 --pipeline-stages 2 --micro-batches 4)
echo "| P = 2 (2 ranks x 1 thread), GPipe, m = 4 | $pipe |"
echo
echo "| schedule | m | idle fraction stage 0, 1 | (P-1)/(m+P-1) | bytes/step measured | closed form | peak stashed bytes stage 0, 1 | peak RSS KiB of the ranks |"
echo "|---|---|---|---|---|---|---|---|"
for sched in gpipe 1f1b; do
  for m in 2 4 8; do
    : > "$out/rss"
    s=$(run 2 1 --pipeline-stages 2 --micro-batches "$m" --pipeline-schedule "$sched")
    $py - "$sched" "$m" "$(tr '\n' ' ' < "$out/rss")" <<PY
import json, sys
s = json.loads('''$s'''.strip().splitlines()[-1])
idle = ", ".join(f"{x:.2f}" for x in s["pipeline_idle_fraction"])
stash = ", ".join(f"{int(x)}" for x in s["pipeline_peak_stashed_bytes"])
print(f"| {sys.argv[1]} | {sys.argv[2]} | {idle} | {s['pipeline_bubble_closed_form']:.3f} | {int(s['pipeline_bytes_per_step'])} | "
      f"{s['pipeline_bytes_per_step_closed_form']} | {stash} | {', '.join(sys.argv[3].split())} |")
PY
  done
done
