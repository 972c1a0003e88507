#!/usr/bin/env bash
# shellcheck disable=SC2154  # the settings come from the eval of pipeline_config.py's output
# The main job end to end, each step the command line a user would type:
#
#   bash scripts/pipeline.sh CONFIG [-q]       (CONFIG: configs/pipeline_fashion_mnist.json, documented in configs/README.md)
#
#   data      the data set compressed into huffgpu shards (gunzip, huffgpu-encode --rm)
#   config    the dist-train configuration of the run: the given one with the shards, the held-out
#             validation split and the seed (dist-train --print-config)
#   train     mpirun -np N dist-train
#   prune     scripts/prune_loop.py (prune-rate's data-driven rates, fine-tuning after each)
#   sparsify  sparsify-fcl on the first FC layer after the last convolution
#   finetune  mpirun -np N dist-train --fine-tune of the sparsified model
#   polish    mpirun -np N bn-polish
#   report    scripts/pipeline_report.py: report.json, report.md and the plots (matplotlib)
# Every model is evaluated (dist-train --evaluate, one process: test accuracy and loss, parameters,
# MACs, inference images/s; a regression configuration ("task": "regression"): test MAE and MSE,
# and the prune loop keeps the validation MAE within prune.mae_increase). Outputs go to the run folder (run_dir); a rerun skips each step whose
# output exists and is newer than its inputs and CONFIG, as make does (delete a step's folder to
# redo it). Each command is echoed to RUN/pipeline.log and stderr; with -q stderr gets one line
# per step. A failing step stops the pipeline with its exit status, earlier outputs kept.
# Environment: HPCNN_BIN (a build's tools/ or an installed bin/; default: this repository's build/tools
# when built, else the tools on PATH), MPIRUN (default mpirun).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
config_file="" quiet=0
for a in "$@"; do
  case $a in
    -q) quiet=1 ;;
    -h | --help) sed -n '3,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
    -*) echo "pipeline: error: unknown option $a" >&2; exit 1 ;;
    *) [ -z "$config_file" ] || { echo "pipeline: error: one CONFIG only" >&2; exit 1; }; config_file=$a ;;
  esac
done
[ -n "$config_file" ] || { echo "usage: scripts/pipeline.sh CONFIG [-q]" >&2; exit 1; }
# The tools: a build tree's, HPCNN_BIN's, or installed ones on PATH (scripts/tools.sh).
# shellcheck source=scripts/tools.sh
. "$here/scripts/tools.sh"
for t in dist-train prune-rate sparsify-fcl bn-polish huffgpu-encode; do
  v=${t//-/_}
  path=$(hpcnn_tool "$t" 2>&1) || { echo "pipeline: $path" >&2; exit 1; }
  printf -v "$v" '%s' "$path"
done
# The folder the report finds them in: a build tree's tools/ (TOOL/TOOL) or a bin/.
bin=$(dirname "$dist_train")
[ "$(basename "$bin")" != dist-train ] || bin=$(dirname "$bin")
py=$here/.venv/bin/python
[ -x "$py" ] || py=python3

# The pipeline configuration: checked (unknown keys are errors), defaults filled in, as shell variables.
settings=$("$py" "$here/scripts/pipeline_config.py" "$config_file") || exit $?
eval "$settings"
mkdir -p "$run"
log_file=$run/pipeline.log
say() { echo "pipeline: $*" >> "$log_file"; [ "$quiet" = 1 ] || echo "pipeline: $*" >&2; }
brief() { echo "pipeline: $*" >> "$log_file"; echo "pipeline: $*" >&2; }

hpcnn_launch "$ranks"  # scripts/tools.sh
launch=""
for a in "${HPCNN_LAUNCH[@]}"; do launch+="$(printf '%q' "$a") "; done
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
q() { printf '%q' "$1"; }
keep_args=""
for a in "${prune_keep[@]}"; do keep_args+=" $(q "$a")"; done
loop_args=$keep_args
[ "$prune_lr" = 0.0 ] || [ "$prune_lr" = 0 ] || loop_args+=" --finetune-lr $(q "$prune_lr")"

# step NAME OUTPUT [INPUT...] -- COMMAND: runs the shell command line COMMAND unless OUTPUT exists
# and is newer than every INPUT and the configuration. Records RUN/steps/NAME.json (command, wall time).
step() {
  local name=$1 out=$2
  shift 2
  local inputs=() in stale=0
  while [ "$1" != -- ]; do inputs+=("$1"); shift; done
  shift
  local cmd=$1
  if [ -e "$out" ]; then
    for in in "${inputs[@]}" "$config_file"; do
      [ "$out" -nt "$in" ] || stale=1
    done
  else
    stale=1
  fi
  if [ "$stale" = 0 ]; then
    brief "$name: up to date ($out)"
    return 0
  fi
  say "$name: \$ $cmd"
  local t0 status=0
  t0=$(date +%s.%N)
  mkdir -p "$run/steps"
  rm -f "$run/steps/$name.skipped"
  # The command's output goes to the log as it comes (tail -f follows it); from byte `off` on it
  # is this step's own.
  local off
  off=$(stat -c %s "$log_file.out" 2> /dev/null || echo 0)
  bash -c "set -o pipefail; $cmd" >> "$log_file.out" 2>&1 &
  local pid=$!
  # On a terminal, a training step shows its progress on one line (epoch, accuracy, time left),
  # from the metrics file the command writes (watch=FILE EPOCHS).
  if [ -n "${watch:-}" ] && [ -t 2 ]; then
    while kill -0 "$pid" 2> /dev/null; do
      progress_line "$name" $watch
      sleep 2
    done
    printf '\r\033[K' >&2
  fi
  wait "$pid" || status=$?
  if [ "$status" != 0 ]; then
    # A step allowed not to apply (may_not_apply=1): the tool found that the model has nothing for
    # it (exit 4, unsupported: sparsify-fcl finds no FC layer to replace). Recorded as skipped with
    # the tool's reason; the chain goes on. Other failures (a compression out of reach) stop it.
    local reason
    reason=$(tail -c +$((off + 1)) "$log_file.out" | grep -m1 -E ': error(: | \(rank)' | sed -E 's/^[^:]+: error[^:]*: //' || true)
    if [ "${may_not_apply:-0}" = 1 ] && [ "$status" = 4 ]; then
      skip "$name" "${reason:-exit status $status}"
      return 1
    fi
    brief "$name: failed with exit status $status; the last lines of its output ($log_file.out):"
    tail -c +$((off + 1)) "$log_file.out" | tail -n 15 >&2
    exit "$status"
  fi
  local secs
  secs=$("$py" -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 3))" "$t0" "$(date +%s.%N)")
  mkdir -p "$run/steps"
  "$py" -c "import json,sys; json.dump({'step': sys.argv[1], 'command': sys.argv[2], 'output': sys.argv[3], 'seconds': float(sys.argv[4]), 'inputs': sys.argv[6:]}, open(sys.argv[5], 'w'))" \
    "$name" "$cmd" "$out" "$secs" "$run/steps/$name.json" "${inputs[@]}"
  brief "$name: done in $secs s"
}

# progress_line NAME METRICS EPOCHS: "NAME: epoch 3/15, test accuracy 91.20%, about 6 min left" on
# one terminal line, from the last line of a dist-train metrics file.
progress_line() {
  [ -s "$2" ] || return 0
  local line
  line=$("$py" - "$2" "$3" <<'PY' 2> /dev/null
import json, sys
rows = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
last, total = rows[-1], int(sys.argv[2])
left = (total - last["epoch"]) * sum(r["seconds"] for r in rows) / len(rows)
acc = next((f"{k.split('_')[0]} accuracy {100 * last[k]:.2f}%" for k in ("test_accuracy", "validation_accuracy") if k in last),
           next((f"{k.split('_')[0]} MAE {last[k]:.4f}" for k in ("test_mae", "validation_mae") if k in last), ""))
print(f"epoch {last['epoch']}/{total}, {acc}, about {left / 60:.0f} min left" if left >= 90 else
      f"epoch {last['epoch']}/{total}, {acc}, under 2 min left")
PY
) || return 0
  printf '\r\033[K%s' "pipeline: $1: $line" >&2
}

# skip NAME REASON: the step does not run; RUN/steps/NAME.skipped holds the reason (the report lists it).
skip() {
  mkdir -p "$run/steps"
  printf '%s\n' "$2" > "$run/steps/$1.skipped"
  brief "$1: skipped: $2"
}

# evaluate NAME MODEL: test accuracy, loss, costs and inference speed of MODEL, one process. Two
# evaluations, the faster one kept (the 2-core VM's speed drifts by 10-25%; the accuracy is the same).
evaluate() {
  local name=$1 model=$2 e
  e="$(q "$dist_train") --config $(q "$run/train.json") --threads 0 --evaluate $(q "$model")"
  step "eval-$name" "$run/eval/$name.json" "$model" -- \
    "mkdir -p $(q "$run/eval") && $e > $(q "$run/eval/$name.1.json") && $e > $(q "$run/eval/$name.2.json") && $(q "$py") -c 'import json,shutil,sys; a,b,o=sys.argv[1:]; shutil.copy(max((a,b), key=lambda f: json.load(open(f))[\"images_per_second\"]), o)' $(q "$run/eval/$name.1.json") $(q "$run/eval/$name.2.json") $(q "$run/eval/$name.json") && rm -f $(q "$run/eval/$name.1.json") $(q "$run/eval/$name.2.json")"
  "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); m=f'test MAE {d[\"mae\"]:.4f}, MSE {d[\"mse\"]:.4f}' if 'mae' in d else f'test accuracy {100*d[\"test_accuracy\"]:.2f}%'; print(f'pipeline: {sys.argv[2]}: {m}, {d[\"parameters\"]:,} parameters, {d[\"macs\"]:,} MACs, {d[\"images_per_second\"]:.0f} images/s')" \
    "$run/eval/$name.json" "$name" | tee -a "$log_file" >&2
}

t_start=$SECONDS
say "run folder $run, configuration $config_file, $ranks rank(s)"
[ -f "$model" ] || step models "$model" -- "$(q "$py") $(q "$here/scripts/make_train_models.py") $(q "$(dirname "$model")")"

# The layers the prune step keeps must be layers of the model: checked now, not after training.
if [ -n "$keep_args" ]; then
  eval "$(q "$prune_rate") $(q "$model") --rate 0 -q$keep_args" > /dev/null \
    || { echo "pipeline: error: prune.keep of $config_file does not fit $model" >&2; exit 1; }
fi

# 1. Data: the four data files as huffgpu shards (dist-train decodes them as it reads them).
mkdir -p "$run/data"
sets=()
for key in train_images train_labels test_images test_labels; do
  src=${data[$key]}
  [ -n "$src" ] || continue
  if [ "$compress" = 1 ]; then
    name=$(basename "$src" .gz)
    shard=$run/data/$name.huf
    if [[ $src == *.gz ]]; then
      cmd="gzip -dc $(q "$src") > $(q "$run/data/$name") && $(q "$huffgpu_encode") -q -f --rm $(q "$run/data/$name")"
    else
      cmd="cp $(q "$src") $(q "$run/data/$name") && $(q "$huffgpu_encode") -q -f --rm $(q "$run/data/$name")"
    fi
    step "data-$key" "$shard" "$src" -- "$cmd"
    sets+=(--set "data.$key=$shard")
  fi
done

if [ "$compress" = 1 ]; then
  pairs=()
  for key in train_images train_labels test_images test_labels; do
    [ -z "${data[$key]}" ] || pairs+=("${data[$key]}" "$run/data/$(basename "${data[$key]}" .gz).huf")
  done
  "$py" - "${pairs[@]}" <<'PY' | tee -a "$log_file" >&2
import gzip, os, sys
def raw(f):  # the size of the data itself: a gzip file's is in its trailer (ISIZE)
    with open(f, "rb") as h:
        if h.read(2) != b"\x1f\x8b":
            return os.path.getsize(f)
        h.seek(-4, 2)
        return int.from_bytes(h.read(4), "little")
given, shards = sys.argv[1::2], sys.argv[2::2]
a, r, b = (sum(os.path.getsize(f) for f in given), sum(raw(f) for f in given), sum(os.path.getsize(f) for f in shards))
print(f"pipeline: data: {len(given)} files, {r:,} bytes ({a:,} as given) -> {b:,} bytes as huffgpu shards ({b / r:.1%})")
PY
fi

# 2. The run's dist-train configuration.
overrides=""
for s in "${sets[@]}" --set "data.validation_samples=$validation" --set "seed=$seed" "${train_set[@]}"; do overrides+=" $(q "$s")"; done
step config "$run/train.json" "$train_config" -- \
  "$(q "$dist_train") --config $(q "$train_config")$overrides --print-config > $(q "$run/train.json")"

# 3. Training.
t=$run/1-train
watch="$t/metrics.jsonl $train_epochs" step train "$t/model.onnx" "$run/train.json" "$model" -- \
  "mkdir -p $(q "$t") && ${launch}$(q "$dist_train") --config $(q "$run/train.json") --model $(q "$model") --epochs $train_epochs -o $(q "$t/model.onnx") --metrics $(q "$t/metrics.jsonl") --checkpoint $(q "$t/checkpoint") -f > $(q "$t/summary.json")"
evaluate train "$t/model.onnx"

# 4. Pruning: the automatic loop (prune-rate with data-driven thresholds, fine-tuning each candidate).
p=$run/2-prune
step prune "$p/final.onnx" "$t/model.onnx" -- \
  "HPCNN_BIN=$(q "$bin") python3 $(q "$here/scripts/prune_loop.py") $(q "$t/model.onnx") --config $(q "$run/train.json") --out $(q "$p") -f --iterations $prune_iterations --ranks $ranks --finetune-epochs $prune_epochs $prune_measure --margin $prune_margin --validation $validation --seed $seed$loop_args"
evaluate prune "$p/final.onnx"

# 5. The structured sparse first FC layer, then fine-tuning (sparsify.enabled: auto skips a model
# without a first FC layer after its convolutions that sparsify-fcl can replace, saying why).
s=$run/3-sparsify
f=$run/4-finetune
final=$p/final.onnx
if [ "$fcl_enabled" = false ]; then
  skip sparsify "sparsify.enabled is false in $config_file"
elif may_not_apply=$([ "$fcl_enabled" = auto ] && echo 1 || echo 0) step sparsify "$s/model.onnx" "$p/final.onnx" -- \
  "mkdir -p $(q "$s") && $(q "$sparsify_fcl") $(q "$p/final.onnx") -o $(q "$s/model.onnx") --compression $fcl_compression --init $fcl_init$( [ "$fcl_init" = data ] && echo " --config $(q "$run/train.json")") --report $(q "$s/report.json") -f"; then
  evaluate sparsify "$s/model.onnx"
  watch="$f/metrics.jsonl $fcl_epochs" step finetune "$f/model.onnx" "$s/model.onnx" -- \
    "mkdir -p $(q "$f") && ${launch}$(q "$dist_train") --config $(q "$run/train.json") --model $(q "$s/model.onnx") --fine-tune --epochs $fcl_epochs -o $(q "$f/model.onnx") --metrics $(q "$f/metrics.jsonl") --checkpoint $(q "$f/checkpoint") -f > $(q "$f/summary.json")"
  evaluate finetune "$f/model.onnx"
  final=$f/model.onnx
fi
[ "$final" = "$f/model.onnx" ] || skip finetune "no sparse FC layer to fine-tune (the sparsify step did not run)"

# 6. BatchNorm statistics on non-augmented data (polish.enabled: auto skips a model without
# BatchNormalization, saying so: PyTorch's default ONNX export folds it into the convolutions).
b=$run/5-polish
if [ "$polish_enabled" = false ]; then
  skip polish "polish.enabled is false in $config_file"
else
  step polish "$b/model.onnx" "$final" -- \
    "mkdir -p $(q "$b") && ${launch}$(q "$bn_polish") $(q "$final") --config $(q "$run/train.json")$( [ "$polish_samples" -gt 0 ] && echo " --samples $polish_samples") -o $(q "$b/model.onnx") --report $(q "$b/report.json") -f"
  if "$py" -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['layers'] else 1)" "$b/report.json"; then
    evaluate polish "$b/model.onnx"
    final=$b/model.onnx
  elif [ "$polish_enabled" = auto ]; then
    skip polish "$(basename "$final") has no BatchNormalization node: nothing to polish (a model exported by PyTorch's default torch.onnx.export has its BatchNorm folded into the convolutions; docs/your-model.md shows the export that keeps it)"
  else
    echo "pipeline: error: polish.enabled is true but $final has no BatchNormalization node" >&2
    exit 4
  fi
fi

# 7. The report.
step report "$run/report.md" "$final" -- \
  "$(q "$py") $(q "$here/scripts/pipeline_report.py") $(q "$run") --bin $(q "$bin") --pipeline-seconds $((SECONDS - t_start))"
cat "$run/summary.txt" >&2
brief "done in $((SECONDS - t_start)) s: $run/report.md, $run/report.json, plots $run/*.png"
