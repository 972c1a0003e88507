#!/usr/bin/env bash
# sparsify-fcl on real data (issue 14): the VGG-style network of configs/fashion_mnist_vgg.json on
# Fashion-MNIST, trained dense on 2 ranks, its first FC layer replaced at >= 20x compression with
# each initialisation (svd, data, random), each fine-tuned with dist-train --fine-tune.
#
#   bash scripts/fcl_study.sh
#
# Steps, each skipped when its output exists (rerunnable; delete a file to redo its step):
#   dense.onnx            12 epochs (the config), 2 ranks
#   <init>.onnx           sparsify-fcl --compression 20 --init <init> (data: 100 batches of the training images)
#   <init>.tuned.onnx     dist-train --fine-tune --epochs FCL_EPOCHS (default 3), 2 ranks
#   *.eval.json           test accuracy and inference images/s (one process, 2 threads, best of 3)
# Then out/fcl_study/table.md. Environment: FCL_OUT (out/fcl_study), FCL_EPOCHS (3), HPCNN_BIN (build/tools).
# The README's 8-epoch rows reuse the dense model:
#   mkdir -p out/fcl_study8 && cp out/fcl_study/dense.* out/fcl_study8/ && rm out/fcl_study8/dense.ckpt
#   FCL_OUT=out/fcl_study8 FCL_EPOCHS=8 bash scripts/fcl_study.sh
# An interrupted fine-tuning starts over (its checkpoint is overwritten, not resumed).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
out=${FCL_OUT:-out/fcl_study}
epochs=${FCL_EPOCHS:-3}
bin=${HPCNN_BIN:-build/tools}
config=configs/fashion_mnist_vgg.json
launch=("${MPIRUN:-mpirun}" --oversubscribe -np 2)
[ "$(id -u)" -ne 0 ] || launch+=(--allow-run-as-root)
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
for init in svd data random; do
  if [ ! -f "$out/$init.onnx" ]; then
    data=()
    [ "$init" != data ] || data=(--config "$config")
    $bin/sparsify-fcl/sparsify-fcl "$out/dense.onnx" -o "$out/$init.onnx" -f --compression 20 --init "$init" "${data[@]}" \
      --report "$out/$init.report.json"
  fi
  if [ ! -f "$out/$init.tuned.onnx" ]; then
    log "fine-tuning the $init-initialised model"
    timed "$out/$init.tuned.seconds" "${launch[@]}" $bin/dist-train/dist-train --config "$config" --model "$out/$init.onnx" \
      --fine-tune --epochs "$epochs" -o "$out/$init.tuned.onnx" -f --metrics "$out/$init.tuned.metrics.jsonl" \
      --checkpoint "$out/$init.ckpt" > "$out/$init.tuned.summary.json"
  fi
done
for f in dense svd data random svd.tuned data.tuned random.tuned; do
  [ -f "$out/$f.eval.json" ] && continue
  best=0 acc=0
  for _ in 1 2 3; do
    OMP_NUM_THREADS=2 $bin/dist-train/dist-train --config "$config" --threads 2 --evaluate "$out/$f.onnx" > "$out/.e.json"
    read -r best acc < <($py -c "import json; e=json.load(open('$out/.e.json')); print(max($best, e['samples']/e['seconds']), e['test_accuracy'])")
  done
  echo "{\"test_accuracy\": $acc, \"images_per_second\": $best}" > "$out/$f.eval.json"
done
rm -f "$out/.e.json"
$py - "$out" "$epochs" <<'PY'
import json, os, sys
out, epochs = sys.argv[1], sys.argv[2]
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
for init in ("svd", "data", "random"):
    r = j(f"{init}.report.json")
    for tuned in (False, True):
        e = j(f"{init}{'.tuned' if tuned else ''}.eval.json")
        rows.append(f"| {init} (rank {r['rank']}, layer {r['layer_compression']:.1f}x){', fine-tuned' if tuned else ''} | "
                    f"{r['params_after']:,} | {100 * e['test_accuracy']:.2f} | {e['images_per_second']:,.0f} | "
                    f"{epochs if tuned else 0} | {secs(f'{init}.tuned.seconds') / 60 if tuned else 0:.0f} min |")
open(os.path.join(out, "table.md"), "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
log "done in $((SECONDS - t0)) s"
