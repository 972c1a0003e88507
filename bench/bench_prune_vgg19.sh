#!/usr/bin/env bash
# Benchmark: prune-rate with -o on the light VGG-19 (143.7 M parameters, 575 MB of weights).
# Prints wall time and peak resident memory, and compares them with the goals
# (under 20 s, under 3x the model's size). Run scripts/setup.sh and scripts/build.sh first
# (BUILD_DIR: another build folder).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$here/out"
mkdir -p "$out/models"
"$here/.venv/bin/python" "$here/tests/fixtures/make_light_models.py" "$out/models" --models vgg19
model="$out/models/vgg19.onnx"
size=$(stat -c %s "$model")
threshold="${1:-0.01}"
best_s="" best_kb=""
for run in 1 2 3; do
  /usr/bin/time -f "%e %M" -o "$out/time.txt" "${BUILD_DIR:-$here/build}/tools/prune-rate/prune-rate" "$model" \
    --threshold "$threshold" -o "$out/vgg19_pruned.onnx" -f -q > /dev/null
  read -r s kb < "$out/time.txt"
  echo "run $run: ${s} s, peak RSS $((kb / 1024)) MiB"
  if [ -z "$best_s" ] || awk "BEGIN{exit !($s < $best_s)}"; then best_s=$s; fi
  if [ -z "$best_kb" ] || [ "$kb" -gt "$best_kb" ]; then best_kb=$kb; fi
done
ratio=$(awk "BEGIN{printf \"%.2f\", $best_kb * 1024 / $size}")
echo "model: $model ($((size / 1000000)) MB), threshold $threshold, $(nproc) cores"
echo "best wall time: ${best_s} s (goal < 20 s)"
echo "peak RSS (max of runs): $((best_kb / 1024)) MiB = ${ratio}x the model size (goal < 3x)"
awk "BEGIN{exit !($best_s < 20 && $ratio < 3)}" && echo "goals: met" || { echo "goals: NOT met"; exit 1; }
