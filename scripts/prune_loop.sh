#!/usr/bin/env bash
# The automatic pruning loop of Sakai et al. ("Automatic pruning rate derivation for structured
# pruning of deep neural networks", ICPR 2022; Sakai, Eto, Teranishi, JAIT 13(3), 2022; the
# authors' auto_prune() in FujitsuResearch/automatic_pruning) over the hpcnn tools:
#
#   scripts/prune_loop.sh MODEL --config TRAIN.json --out DIR [options]
#
# Each iteration: prune-rate derives per-layer rates from the current model's loss and connection
# sensitivity (data-driven thresholds, bound U) and writes the smaller model -> dist-train
# fine-tunes it (fresh optimizer and learning-rate schedule, stopping after the first epoch whose
# validation accuracy exceeds the original model's minus the allowed drop) -> accept (the tuned
# model is the new current model; U grows) or reject (the current model stays; U shrinks). The
# loop ends when no layer would change any more, when U < 0, or after --iterations. A candidate
# identical to one already rejected for the same current model (U shrank but no rate changed) is
# rejected again without fine-tuning: it would train to the same weights.
#
# Validation split: the last --validation N (default 5000) of the training images, held out
# from every fine-tuning (dist-train's data.validation_samples); the model being pruned should
# have been trained with the same split held out. Test data are not used inside the loop: the
# final model's test accuracy is measured once, at the end.
#
# Options:
#   --config FILE          dist-train configuration (data, augmentation, optimizer) [required]
#   --out DIR              output folder (created; refuses a non-empty one unless -f)   [required]
#   --iterations K         at most K iterations (default 10)
#   --ranks N              ranks of every tool run under mpirun (default 2; 1: no mpirun)
#   --finetune-epochs E    epochs of fine-tuning per iteration at most (default 3)
#   --finetune-lr LR       peak learning rate of fine-tuning (default: the config's lr.base / 10),
#                          cosine decay, no warm-up, no Final Polishing
#   --accuracy-drop A      allowed drop of validation accuracy in points (default 0.1; the
#                          authors' acc_control; negative: a gain is required)
#   --validation N         validation samples held out of the training set (default 5000)
#   --margin M             loss margin of the thresholds (default 0.1)
#   --batches B            batches of the loss and sensitivity (default 100, batch 128)
#   --keep LAYERS          comma-separated layers never pruned (prune-rate --keep), e.g. the FC
#                          layer sparsify-fcl replaces next
#   --seed S               seed of fine-tuning (default: the config's)
#   -f                     reuse a non-empty --out
#   --resume               continue an interrupted run in --out (implies -f): the iterations
#                          already done are kept (DIR/state.sh, written at the start of every
#                          iteration, holds the loop's state), the interrupted iteration reuses
#                          its prune report and candidate, and its fine-tuning continues from
#                          its checkpoint (DIR/it<i>/ckpt, written every epoch). A finished run
#                          that stopped at its iteration limit goes on with a larger
#                          --iterations K. Every option but --iterations must be the one the run
#                          started with (DIR/options is checked).
#   --replay LOG           rebuild a run from its log.json (e.g. a study record, when the run's
#                          folder is lost): the first len(LOG) iterations are run again, each
#                          candidate checked against LOG (parameters, kept channels); a rejected
#                          one is not fine-tuned (LOG's validation accuracy is taken), an accepted
#                          one is fine-tuned again (its model is needed) and its validation
#                          accuracy must equal LOG's; any difference stops the run (the same
#                          options, ranks and tools give the same result bit for bit). Later
#                          iterations run as usual. Their log entries say "replayed": true, and
#                          summary.json's seconds count the skipped fine-tunings at LOG's
#                          durations: the loop's cost, not the replay's.
# Environment: HPCNN_BIN (a build's tools/ or an installed bin/; default: this repository's build/tools when
# built, else the tools on PATH: scripts/tools.sh), MPIRUN.
#
# Outputs in DIR: final.onnx (the last accepted model, or a copy of MODEL), log.json (one entry per
# iteration: rates, parameters, MACs, loss, validation accuracy, U, accepted), summary.json (before
# and after: parameters, MACs, validation and test accuracy, iterations, wall time), and per
# iteration it<i>/ with the prune report, the candidate, the fine-tuned model and its metrics.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/tools.sh
. "$here/scripts/tools.sh"
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0; }
die() { echo "prune_loop: error: $*" >&2; exit 1; }

model="" config="" out="" iterations=10 ranks=2 epochs=3 lr="" drop=0.1 validation=5000 margin=0.1 batches=100
seed="" force=0 keep=() keep_list="" resume=0 replay=""
while [ $# -gt 0 ]; do
  case "$1" in
    --config) config=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --finetune-epochs) epochs=$2; shift 2 ;;
    --finetune-lr) lr=$2; shift 2 ;;
    --accuracy-drop) drop=$2; shift 2 ;;
    --validation) validation=$2; shift 2 ;;
    --margin) margin=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --keep) [ $# -ge 2 ] || die "--keep needs a comma-separated list of layers"
            keep_list=${keep_list:+$keep_list,}$2; keep=(--keep "$keep_list"); shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    -f) force=1; shift ;;
    --resume) resume=1 force=1; shift ;;
    --replay) [ $# -ge 2 ] || die "--replay needs a log.json"; replay=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) die "unknown option $1 (--help lists them)" ;;
    *) [ -z "$model" ] || die "one MODEL only ('$model' and '$1')"; model=$1; shift ;;
  esac
done
[ -n "$model" ] && [ -n "$config" ] && [ -n "$out" ] || die "usage: prune_loop.sh MODEL --config TRAIN.json --out DIR [options]"
# The tools: a build tree's, HPCNN_BIN's, or installed ones on PATH (scripts/tools.sh).
prune_rate=$(hpcnn_tool prune-rate 2>&1) || die "${prune_rate#error: }"
dist_train=$(hpcnn_tool dist-train 2>&1) || die "${dist_train#error: }"
[ -f "$model" ] || die "no model '$model'"
if [ -n "$replay" ]; then
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert isinstance(d, list) and all(isinstance(e, dict) and e.get('iteration') == k + 1 for k, e in enumerate(d))" \
    "$replay" 2>/dev/null || die "--replay: '$replay' is not a loop's log.json (a list of iterations 1, 2, ...)"
fi
[ -f "$config" ] || die "no configuration '$config'"
for v in iterations ranks epochs validation batches; do
  [[ ${!v} =~ ^[0-9]+$ ]] && [ "${!v}" -ge 1 ] || die "--${v/epochs/finetune-epochs} must be a positive integer, not '${!v}'"
done
if [ -d "$out" ] && [ -n "$(ls -A "$out")" ] && [ "$force" != 1 ]; then die "'$out' is not empty (-f reuses it)"; fi
# The kept layers are checked against the model before any work (no data, no output).
if [ ${#keep[@]} -gt 0 ]; then
  "$prune_rate" "$model" --rate 0 "${keep[@]}" -q > /dev/null || die "--keep '$keep_list' does not fit '$model'"
fi
mkdir -p "$out"
py=python3
# The options a run started with, to check a --resume against (the fine-tuning seed and bounds
# decide every iteration's result).
options="$model|$config|$ranks|$epochs|$lr|$drop|$validation|$margin|$batches|$seed|$keep_list|${HPCNN_BIN:-}"
if [ "$resume" = 1 ]; then
  [ -f "$out/state.sh" ] || die "--resume: '$out' holds no interrupted run (no state.sh)"
  [ "$(cat "$out/options" 2>/dev/null)" = "$options" ] || die "--resume: the options differ from those '$out' was started with ($(cat "$out/options" 2>/dev/null))"
else
  rm -f "$out/state.sh" "$out/summary.json"
  echo "$options" > "$out/options"
fi
json() { $py -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

launch=()
if [ "$ranks" -gt 1 ]; then
  launch=("${MPIRUN:-mpirun}" --oversubscribe -np "$ranks")
  [ "$(id -u)" -ne 0 ] || launch+=(--allow-run-as-root)
fi
common=(--set "data.validation_samples=$validation")
[ -z "$seed" ] || common+=(--set "seed=$seed")
dist() { OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "${launch[@]}" "$dist_train" --config "$config" "${common[@]}" "$@"; }
prune() { OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "${launch[@]}" "$prune_rate" --config "$config" \
            --margin "$margin" --batches "$batches" "${keep[@]}" "$@"; }
evaluate() {  # MODEL SPLIT -> accuracy in percent
  dist --evaluate "$1" --split "$2" > "$out/.eval.json"
  json "$out/.eval.json" "d['$2_accuracy'] * 100"
}

t0=$SECONDS
if [ -z "$lr" ]; then
  lr=$("$dist_train" --config "$config" --print-config | $py -c "import json,sys; print(json.load(sys.stdin)['lr']['base'] / 10)")
fi
log="$out/log.json"
resume_at=0  # the interrupted iteration, whose prune report, candidate and checkpoint are reused
if [ "$resume" = 1 ]; then
  # shellcheck disable=SC1091  # written by save_state below
  . "$out/state.sh" 2>/dev/null && [[ ${i:-} =~ ^[0-9]+$ ]] && [[ ${log_bytes:-} =~ ^[0-9]+$ ]] &&
    [[ ${elapsed:-} =~ ^[0-9]+$ ]] && [[ ${loop_done:-} =~ ^[01]$ ]] && [ -n "${goal:-}" ] && [ -f "${current:-}" ] ||
    die "--resume: '$out/state.sh' is not a loop state this script wrote, or its current model is gone"
  [ -f "$log.tmp" ] && [ "$(stat -c %s "$log.tmp")" -ge "$log_bytes" ] ||
    die "--resume: '$log.tmp' is missing or shorter than state.sh says ($log_bytes bytes)"
  truncate -s "$log_bytes" "$log.tmp"  # drops an entry the interrupted iteration may have written
  t0=$((SECONDS - elapsed))
  resume_at=$i
  if [ -f "$out/summary.json" ]; then  # a finished run: only one stopped by its iteration limit goes on
    [ "$stop" = "iteration limit" ] && [ "$iterations" -ge "$i" ] ||
      die "--resume: the run in '$out' has finished (stopped by: $stop, after $((i - 1)) iterations); only a run stopped by its iteration limit goes on, with a larger --iterations"
    loop_done=0
    rm -f "$out/summary.json"
  fi
  echo "prune_loop: resuming $([ "$loop_done" = 1 ] && echo "after the last iteration" || echo "at iteration $i") (current model $current)" >&2
else
  cp "$model" "$out/original.onnx"
  current="$out/original.onnx"
  acc_before=$(evaluate "$current" validation)
  goal=$($py -c "print(($acc_before - $drop) / 100)")
  early=$($py -c "g = $goal; print(g if 0 < g < 1 else 0)")  # dist-train's early stop takes a fraction in (0, 1)
  echo "prune_loop: original validation accuracy $acc_before%; a candidate is accepted above $($py -c "print($goal*100)")%" >&2
  loss_before="" bound="" stop="iteration limit" repeats=0 loop_done=0
  declare -A rejected=()  # kept channels of the rejected candidates of the current model -> iteration
  echo "[" > "$log.tmp"
  sep=""
  i=1
fi
# The loop's state at the start of every iteration and after the last, written atomically
# (what --resume reads back).
save_state() {
  log_bytes=$(stat -c %s "$log.tmp")
  elapsed=$((SECONDS - t0))
  declare -p i current loss_before bound stop repeats sep log_bytes elapsed acc_before goal early lr loop_done rejected \
    > "$out/state.sh.tmp"
  mv "$out/state.sh.tmp" "$out/state.sh"
}
for ((; loop_done == 0 && i <= iterations; i++)); do
  save_state
  dir="$out/it$i"
  mkdir -p "$dir"
  args=()
  [ -z "$loss_before" ] || args+=(--loss-before "$loss_before")
  [ -z "$bound" ] || args+=(--upper-bound "$bound")
  # An interrupted iteration keeps its prune report and candidate (both written atomically,
  # the report last); a fresh one removes what an earlier run may have left there.
  if [ "$i" != "$resume_at" ] || [ ! -f "$dir/prune.json" ] || [ ! -f "$dir/candidate.onnx" ]; then
    rm -f "$dir/ckpt" "$dir/prune.json"
    prune "$current" "${args[@]}" -o "$dir/candidate.onnx" -f --report "$dir/prune.json"
  fi
  [ -n "$loss_before" ] || loss_before=$(json "$dir/prune.json" "repr(d['data_driven']['loss'])")
  if [ "$(json "$dir/prune.json" "d['data_driven']['pruned_any']")" != True ]; then
    stop="no layer changes"
    rm -f "$dir/candidate.onnx"
    break
  fi
  # The same candidate as one already rejected (same current model, the smaller U changed no
  # rate): it would be fine-tuned to the same weights and rejected again, so it is rejected at
  # once and U shrinks further. Such steps do not count as iterations (at most 10 per iteration).
  signature=$(json "$dir/prune.json" "'-'.join(str(g['kept_channels']) for g in d['groups'])")
  if [ -n "${rejected[$signature]:-}" ] && [ "$repeats" -lt $((10 * iterations)) ]; then
    repeats=$((repeats + 1))
    bound=$(json "$dir/prune.json" "repr(d['data_driven']['upper_bound']['next_if_rejected'])")
    echo "prune_loop: the same candidate as iteration ${rejected[$signature]}, rejected again without fine-tuning; next U $bound" >&2
    rm -rf "$dir"
    i=$((i - 1))
    if $py -c "import sys; sys.exit(0 if $bound < 0 else 1)"; then stop="upper bound below 0"; break; fi
    continue
  fi
  replayed=false
  if [ -n "$replay" ]; then
    # Iteration i of the log being replayed: the same candidate, or the replay has diverged.
    replayed=$($py - "$replay" "$i" "$dir/prune.json" "$dir/finetune.json" <<'EOF'
import json, sys
log, i, report, finetune = json.load(open(sys.argv[1])), int(sys.argv[2]), json.load(open(sys.argv[3])), sys.argv[4]
if i > len(log):
    print("false"); sys.exit()
e = log[i - 1]
kept = {g["layers"][0]: g["kept_channels"] for g in report["groups"] if g["prunable"]}
if report["totals"]["params_after"] != e["params_after"] or kept != e["kept_channels"]:
    sys.exit(f"iteration {i}: the candidate has {report['totals']['params_after']} parameters (kept channels {kept}), "
             f"the log {e['params_after']} ({e['kept_channels']})")
if e["accepted"]:
    print("check"); sys.exit()
with open(finetune, "w") as f:  # what the fine-tuning reported then
    json.dump({"validation_accuracy": e["validation_accuracy"], "epochs_run": e["finetune_epochs"], "seconds": e["finetune_seconds"]}, f)
print("true")
EOF
) || die "--replay: '$replay' diverged (see above): not the same options, tools or model"
  fi
  if [ "$replayed" = true ]; then
    t0=$((t0 - $(json "$dir/finetune.json" "round(d['seconds'])")))  # the loop's cost counts the fine-tuning skipped
  else
    # --resume auto: the fine-tuning of an interrupted iteration goes on from its checkpoint
    dist --model "$dir/candidate.onnx" -o "$dir/tuned.onnx" -f --epochs "$epochs" --lr "$lr" --resume auto \
      --set lr.warmup_epochs=0 --set lr.decay=cosine --set final_polish_epochs=0 --set "stop_at_validation_accuracy=$early" \
      --set 'data.test_images=""' --set 'data.test_labels=""' \
      --metrics "$dir/metrics.jsonl" --checkpoint "$dir/ckpt" > "$dir/finetune.json"
    rm -f "$dir/ckpt"
  fi
  acc=$(json "$dir/finetune.json" "d['validation_accuracy'] * 100")
  if [ "$replayed" = check ]; then
    want=$(json "$replay" "d[$i - 1]['validation_accuracy'] * 100")  # a count over the validation split: equal or >= 1 sample apart
    $py -c "import sys; sys.exit(0 if abs($acc - $want) < 1e-9 else 1)" ||
      die "--replay: iteration $i: validation accuracy $acc% after fine-tuning, the log says $want%: not the same options, tools or ranks"
  fi
  accepted=$($py -c "print('true' if $acc / 100 > $goal else 'false')")
  if [ "$accepted" = true ]; then
    next=$(json "$dir/prune.json" "repr(d['data_driven']['upper_bound']['next_if_accepted'])")
    current="$dir/tuned.onnx"
    rejected=()
  else
    next=$(json "$dir/prune.json" "repr(d['data_driven']['upper_bound']['next_if_rejected'])")
    rejected[$signature]=$i
  fi
  $py - "$dir/prune.json" "$dir/finetune.json" "$i" "$accepted" "$acc" "$next" "$current" >> "$log.tmp" <<EOF
import json, sys
r = json.load(open(sys.argv[1])); f = json.load(open(sys.argv[2]))
d = r["data_driven"]
e = {"iteration": int(sys.argv[3]), "accepted": sys.argv[4] == "true",
     "params_before": r["totals"]["params_before"], "params_after": r["totals"]["params_after"],
     "macs_before": r["totals"]["macs_before"], "macs_after": r["totals"]["macs_after"],
     "loss_before": d["loss_before"], "loss": d["loss"], "upper_bound": d["upper_bound"]["used"],
     "upper_bound_next": float(sys.argv[6]), "validation_accuracy": float(sys.argv[5]) / 100,
     "finetune_epochs": f["epochs_run"], "finetune_seconds": f["seconds"],
     "rates": {g["layers"][0]: g["rate"] for g in r["groups"] if g["prunable"]},
     "kept_channels": {g["layers"][0]: g["kept_channels"] for g in r["groups"] if g["prunable"]},
     "current_model": sys.argv[7]}
if "$replayed" == "true":
    e["replayed"] = True
print("$sep" + json.dumps(e))
EOF
  sep=","
  echo "prune_loop: iteration $i: $(json "$dir/prune.json" "d['totals']['params_before']") -> $(json "$dir/prune.json" "d['totals']['params_after']") parameters, validation accuracy $acc%: $([ "$accepted" = true ] && echo accepted || echo rejected), next U $next" >&2
  bound=$next
  if $py -c "import sys; sys.exit(0 if $bound < 0 else 1)"; then stop="upper bound below 0"; break; fi
done
loop_done=1
save_state
cp "$log.tmp" "$log.tmp2" && echo "]" >> "$log.tmp2" && mv "$log.tmp2" "$log"
cp "$current" "$out/final.onnx.tmp" && mv "$out/final.onnx.tmp" "$out/final.onnx"

# The final table: test accuracy appears only here.
acc_after=$(evaluate "$out/final.onnx" validation)
test_before=$(evaluate "$out/original.onnx" test)
test_after=$(evaluate "$out/final.onnx" test)
"$prune_rate" "$out/final.onnx" --rate 0 > "$out/.costs_after.json"
"$prune_rate" "$out/original.onnx" --rate 0 > "$out/.costs_before.json"
rm -f "$out/.eval.json"
$py - "$out" "$stop" "$((SECONDS - t0))" "$acc_before" "$acc_after" "$test_before" "$test_after" "$repeats" "$keep_list" > "$out/summary.json.tmp" <<'EOF'
import json, sys
out = sys.argv[1]
log = json.load(open(f"{out}/log.json"))
b = json.load(open(f"{out}/.costs_before.json"))["totals"]
a = json.load(open(f"{out}/.costs_after.json"))["totals"]
print(json.dumps({
    "params_before": b["params_before"], "params_after": a["params_before"],
    "params_reduction": 1 - a["params_before"] / b["params_before"],
    "macs_before": b["macs_before"], "macs_after": a["macs_before"],
    "validation_accuracy_before": float(sys.argv[4]) / 100, "validation_accuracy_after": float(sys.argv[5]) / 100,
    "test_accuracy_before": float(sys.argv[6]) / 100, "test_accuracy_after": float(sys.argv[7]) / 100,
    "iterations": len(log), "accepted": sum(e["accepted"] for e in log), "stopped_by": sys.argv[2],
    "rejected_without_finetuning": int(sys.argv[8]), "keep": [k for k in sys.argv[9].split(",") if k],
    "seconds": int(sys.argv[3])}, indent=1))
EOF
mv "$out/summary.json.tmp" "$out/summary.json"
rm -f "$out/.costs_before.json" "$out/.costs_after.json"  # state.sh and log.json.tmp stay: --resume --iterations K goes on
cat "$out/summary.json"
