#!/usr/bin/env bash
# sparsify-fcl on real data (issue 14): the VGG-style network of configs/fashion_mnist_vgg.json on
# Fashion-MNIST, trained dense on 2 ranks, its first FC layer replaced at >= 20x compression with
# each initialisation (svd, data, random), each fine-tuned with dist-train --fine-tune.
#
#   bash studies/sparse-fcl/run.sh
#
# Steps, each skipped when its output exists (rerunnable; delete a file to redo its step):
#   dense.onnx            12 epochs (the config), 2 ranks
#   <init>.onnx           sparsify-fcl --compression 20 --init <init> (data: 100 batches of the training images)
#   <init>.tuned.onnx     dist-train --fine-tune --epochs FCL_EPOCHS (default 3), 2 ranks
#   *.eval.json           test accuracy and inference images/s (one process, 2 threads, best of 3)
#   <init>.s<S>.tuned.onnx  the same fine-tuning with training seed S, for each S of FCL_SEEDS after
#                         the first (seed 1 is the config's own seed: <init>.tuned.onnx)
# Then out/fcl_study/table.md (mean ± sd over the seeds where there are several).
# Environment: FCL_OUT (out/fcl_study), FCL_EPOCHS (3), FCL_SEEDS ("1"), FCL_INITS ("svd data random"),
# HPCNN_BIN (build/tools). The 3-seed figure of studies/sparse-fcl/README.md:
#   FCL_OUT=out/fcl_study8 FCL_EPOCHS=8 FCL_SEEDS="1 2 3" FCL_INITS=svd bash studies/sparse-fcl/run.sh
# The README's 8-epoch rows reuse the dense model:
#   mkdir -p out/fcl_study8 && cp out/fcl_study/dense.* out/fcl_study8/ && rm out/fcl_study8/dense.ckpt
#   FCL_OUT=out/fcl_study8 FCL_EPOCHS=8 bash studies/sparse-fcl/run.sh
# An interrupted fine-tuning starts over (its checkpoint is overwritten, not resumed).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$here"
out=${FCL_OUT:-out/fcl_study}
epochs=${FCL_EPOCHS:-3}
read -r -a seeds <<< "${FCL_SEEDS:-1}"
read -r -a inits <<< "${FCL_INITS:-svd data random}"
[ "${seeds[0]}" = 1 ] || { echo "fcl_study: FCL_SEEDS must start with 1 (the config's seed)" >&2; exit 1; }
bin=${HPCNN_BIN:-build/tools}
config=configs/fashion_mnist_vgg.json
# shellcheck source=scripts/tools.sh
. scripts/tools.sh
hpcnn_launch 2
launch=("${HPCNN_LAUNCH[@]}")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
py=.venv/bin/python
mkdir -p "$out"
[ -f build/models/fashion_mnist_vgg.onnx ] || $py scripts/make_train_models.py build/models
log() { echo "fcl_study: $(date +%H:%M:%S) $*" >&2; }
t0=$SECONDS
timed() {  # FILE COMMAND...: runs the command, records its wall seconds in FILE
  local f=$1 t=$SECONDS
  shift
  "$@"
  echo $((SECONDS - t)) > "$f"
}
if [ ! -f "$out/dense.onnx" ]; then
  log "training the dense model"
  timed "$out/dense.seconds" "${launch[@]}" $bin/dist-train/dist-train --config "$config" -o "$out/dense.onnx" -f \
    --metrics "$out/dense.metrics.jsonl" --checkpoint "$out/dense.ckpt" > "$out/dense.summary.json"
fi
for init in "${inits[@]}"; do
  if [ ! -f "$out/$init.onnx" ]; then
    data=()
    [ "$init" != data ] || data=(--config "$config")
    $bin/sparsify-fcl/sparsify-fcl "$out/dense.onnx" -o "$out/$init.onnx" -f --compression 20 --init "$init" "${data[@]}" \
      --report "$out/$init.report.json"
  fi
  for seed in "${seeds[@]}"; do
    t=$init.tuned seed_flags=()
    [ "$seed" = 1 ] || { t=$init.s$seed.tuned; seed_flags=(--set "seed=$seed"); }
    [ ! -f "$out/$t.onnx" ] || continue
    log "fine-tuning the $init-initialised model, seed $seed"
    timed "$out/$t.seconds" "${launch[@]}" $bin/dist-train/dist-train --config "$config" --model "$out/$init.onnx" \
      --fine-tune --epochs "$epochs" "${seed_flags[@]}" -o "$out/$t.onnx" -f --metrics "$out/$t.metrics.jsonl" \
      --checkpoint "$out/$init.ckpt" > "$out/$t.summary.json"
  done
done
evals=(dense)
for init in "${inits[@]}"; do
  evals+=("$init" "$init.tuned")
  for seed in "${seeds[@]:1}"; do evals+=("$init.s$seed.tuned"); done
done
for f in "${evals[@]}"; do
  [ -f "$out/$f.eval.json" ] && continue
  best=0 acc=0
  for _ in 1 2 3; do
    OMP_NUM_THREADS=2 $bin/dist-train/dist-train --config "$config" --threads 2 --evaluate "$out/$f.onnx" > "$out/.e.json"
    read -r best acc < <($py -c "import json; e=json.load(open('$out/.e.json')); print(max($best, e['samples']/e['seconds']), e['test_accuracy'])")
  done
  echo "{\"test_accuracy\": $acc, \"images_per_second\": $best}" > "$out/$f.eval.json"
done
rm -f "$out/.e.json"
$py - "$out" "$epochs" "${seeds[*]}" "${inits[*]}" <<'PY'
import json, os, statistics, sys
out, epochs = sys.argv[1], sys.argv[2]
seeds, inits = sys.argv[3].split(), sys.argv[4].split()
def j(n):
    return json.load(open(os.path.join(out, n)))
def secs(n):
    p = os.path.join(out, n)
    return int(open(p).read()) if os.path.exists(p) else 0
dense = j("dense.eval.json")
rows = ["| model | parameters | test accuracy % | inference images/s | epochs | wall time |", "|---|---|---|---|---|---|"]
rep = j("svd.report.json")
rows.append(f"| dense | {rep['params_before']:,} | {100 * dense['test_accuracy']:.2f} | {dense['images_per_second']:,.0f} | "
            f"{j('dense.summary.json')['epochs_run']} | {secs('dense.seconds') / 60:.0f} min |")
for init in inits:
    r = j(f"{init}.report.json")
    for tuned in (False, True):
        e = j(f"{init}{'.tuned' if tuned else ''}.eval.json")
        label = f"{init} (rank {r['rank']}, layer {r['layer_compression']:.1f}x){', fine-tuned' if tuned else ''}"
        rows.append(f"| {label}{', seed 1' if tuned and len(seeds) > 1 else ''} | "
                    f"{r['params_after']:,} | {100 * e['test_accuracy']:.2f} | {e['images_per_second']:,.0f} | "
                    f"{epochs if tuned else 0} | {secs(f'{init}.tuned.seconds') / 60 if tuned else 0:.0f} min |")
    if len(seeds) > 1:
        accs = [100 * j(f"{init}.tuned.eval.json")["test_accuracy"]]
        for s in seeds[1:]:
            e = j(f"{init}.s{s}.tuned.eval.json")
            accs.append(100 * e["test_accuracy"])
            rows.append(f"| {label}, seed {s} | {r['params_after']:,} | {accs[-1]:.2f} | {e['images_per_second']:,.0f} | "
                        f"{epochs} | {secs(f'{init}.s{s}.tuned.seconds') / 60:.0f} min |")
        gap = [a - 100 * dense["test_accuracy"] for a in accs]
        rows.append(f"| **{label}, mean ± sd over {len(seeds)} seeds** | {r['params_after']:,} | "
                    f"**{statistics.mean(accs):.2f} ± {statistics.stdev(accs):.2f}** "
                    f"({statistics.mean(gap):+.2f} against dense) | | {epochs} | |")
open(os.path.join(out, "table.md"), "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
log "done in $((SECONDS - t0)) s"
