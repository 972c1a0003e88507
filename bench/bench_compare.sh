#!/usr/bin/env bash
# Old build against new build, interleaved in one run (old, new, old, new, ...), best of ROUNDS
# (default 3), for the benchmarks of studies/: the huffgpu CPU codec (huffman_bench, TOTAL of the
# corpus and Fashion-MNIST: encode/decode MB/s at 1 and 2 threads), training steps (train_bench
# on the two models of bench/bench_models.py at 1 and 2 threads), dist-train (images/s at 1 and
# 2 ranks, ms/step of the 90%-sparse CNN dense and sparse: bench/bench_dist.sh) and prune-rate on
# the light VGG-19 (wall time and peak RSS: bench/bench_prune_vgg19.sh's run). Prints one row per
# figure: old, new, new/old, and flags rows more than 5% worse.
# usage: bench/bench_compare.sh OLD_BUILD NEW_BUILD    (both built with the benchmark targets
#        huffman_bench, train_bench, dist-train, prune-rate; scripts/setup.sh run)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
old=$(cd "$1" && pwd) new=$(cd "$2" && pwd)
rounds=${ROUNDS:-3}
py="$here/.venv/bin/python"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
corpus="${CORPUS:-$here/../shared/corpus}"
[ -d "$corpus" ] || corpus="$here/tests/data"
files=()
for f in "$corpus"/*; do case "$f" in *.md) ;; *) [ -f "$f" ] && files+=("$f") ;; esac; done
gzip -dc /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz > "$tmp/fmnist"
# The training models come from PyTorch (Debian's python3-torch; bench/bench_train.sh installs it).
/usr/bin/python3 "$here/bench/bench_models.py" "$tmp/models" --models fmnist_cnn,resnet18 --batch 64 > /dev/null
"$py" "$here/tests/fixtures/make_light_models.py" "$tmp/light" --models vgg19 > /dev/null
results="${RESULTS:-$here/out/bench_compare_results.txt}"  # kept: the raw figures of every run
mkdir -p "$(dirname "$results")"
: > "$results"
record() { echo "$1 $2 ${3:-missing} $4" >> "$results"; }  # figure side value higher_is_better(1/0)

for r in $(seq "$rounds"); do
  for side in old new; do
    b=$([ "$side" = old ] && echo "$old" || echo "$new")
    echo "== round $r: $side ($b)" >&2
    # huffgpu: the TOTAL row's T=1 and T=2 speeds (columns: enc T=1, dec T=1, enc T=2, dec T=2)
    for set in corpus fmnist; do
      if [ "$set" = corpus ]; then args=("${files[@]}"); else args=("$tmp/fmnist"); fi
      line=$("$b/bench/huffman_bench" --repeat 5 "${args[@]}" | grep '^TOTAL')
      read -r e1 d1 e2 d2 <<< "$(awk -F'|' '{split($2, a, " "); print a[1], a[2], a[3], a[4]}' <<< "$line")"
      record "huffman_${set}_encode_T1_MBps" "$side" "$e1" 1; record "huffman_${set}_decode_T1_MBps" "$side" "$d1" 1
      record "huffman_${set}_encode_T2_MBps" "$side" "$e2" 1; record "huffman_${set}_decode_T2_MBps" "$side" "$d2" 1
    done
    # training steps
    for m in fmnist_cnn resnet18; do
      steps=20; [ "$m" = resnet18 ] && steps=5
      for t in 1 2; do
        j=$("$b/bench/train_bench" "$tmp/models/$m.onnx" --threads "$t" --warmup 2 --steps "$steps" 2> /dev/null)
        record "train_${m}_T${t}_img_per_s" "$side" "$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["images_per_s"])' "$j")" 1
        record "train_${m}_T${t}_peak_MiB" "$side" "$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["peak_rss_mib"])' "$j")" 0
      done
    done
    # dist-train
    out=$(BUILD_DIR="$b" bash "$here/bench/bench_dist.sh" 100)
    record dist_1rank_img_per_s "$side" "$(awk '/^  1 rank :/{print $4}' <<< "$out")" 1
    record dist_2ranks_img_per_s "$side" "$(awk '/^  2 ranks:/{print $3}' <<< "$out")" 1
    record dist_sparse90_dense_ms_per_step "$side" "$(awk '/  dense :/{print $(NF-1)}' <<< "$out")" 0
    record dist_sparse90_sparse_ms_per_step "$side" "$(awk '/  sparse:/{print $(NF-1)}' <<< "$out")" 0
    # prune-rate on the light VGG-19
    /usr/bin/time -f "%e %M" -o "$tmp/time.txt" "$b/tools/prune-rate/prune-rate" "$tmp/light/vgg19.onnx" --threshold 0.01 \
      -o "$tmp/vgg19_pruned.onnx" -f -q > /dev/null
    read -r s kb < "$tmp/time.txt"
    record prune_vgg19_seconds "$side" "$s" 0
    record prune_vgg19_peak_MiB "$side" "$((kb / 1024))" 0
  done
done

"$py" - "$results" "$rounds" <<'PY'
import sys
from collections import defaultdict
vals, higher = defaultdict(lambda: defaultdict(list)), {}
for line in open(sys.argv[1]):
    fig, side, v, hb = line.split()
    if v == "missing":
        print(f"warning: no value for {fig} ({side})")
        continue
    vals[fig][side].append(float(v))
    higher[fig] = hb == "1"
print(f"{'figure':40s} {'old':>10s} {'new':>10s} {'new/old':>8s}   (best of {sys.argv[2]} interleaved rounds)")
worse = 0
for fig, d in vals.items():
    best = max if higher[fig] else min
    o, n = best(d["old"]), best(d["new"])
    ratio = n / o if o else float("nan")
    bad = (ratio < 0.95) if higher[fig] else (ratio > 1.05)
    worse += bad
    print(f"{fig:40s} {o:10.1f} {n:10.1f} {ratio:8.3f}  {'<-- more than 5% worse' if bad else ''}")
print(f"{worse} figure(s) more than 5% worse")
PY
