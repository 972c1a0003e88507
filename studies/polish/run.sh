#!/usr/bin/env bash
# What Final Polishing buys on Fashion-MNIST (issue 15): the example CNN and ResNet-20 of configs/
# trained with a large global batch (2 ranks x 256 x 4 accumulation steps = 2,048), LARS, warm-up,
# label smoothing and strong augmentation (random resized crop, flip, random erasing: data/augment.h),
# then compared in four arms, 3 seeds each (seed s: initial weights from make_train_models.py
# --seed s, and dist-train's seed s for the data order, augmentation and Dropout):
#   (a) no polishing: trained on augmented data to the end;
#   (b) (a) + bn-polish (BatchNorm statistics re-estimated on non-augmented training images);
#   (c) final_polish_epochs: the last FP epochs train on non-augmented data (Kasagi et al., HPDC 2020);
#   (d) (c) + bn-polish.
#
#   bash studies/polish/run.sh [MODEL...]        MODEL: cnn, resnet20 (default both)
#
# Each step is skipped when its output exists (rerunnable; delete a file to redo its step; an
# interrupted training continues from the checkpoint of its last epoch). Then
# studies/polish/report.py writes out/polish_study/table.md.
# Environment: HPCNN_BIN (build/tools), POLISH_OUT (out/polish_study), SEEDS ("1 2 3"), RANKS (2),
# BATCH (256 per rank), ACCUMULATION (4), EPOCHS_cnn (20), EPOCHS_resnet20 (12), FINAL_POLISH (2),
# LR (1.0: the peak learning rate at the global batch), WARMUP (2 epochs), TRUST (0.01: LARS trust
# coefficient), POLISH_SAMPLES (20000: the first training images bn-polish reads), RESIZED_SCALE
# ("[0.35, 1.0]"), ERASING (0.5: probability), ARMS ("a c": the trained arms; "a" alone for a pilot,
# which then leaves (c) and (d) out of the table).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$here"
out=${POLISH_OUT:-out/polish_study}
bin=${HPCNN_BIN:-build/tools}
seeds=${SEEDS:-1 2 3}
ranks=${RANKS:-2}
batch=${BATCH:-256}
accumulation=${ACCUMULATION:-4}
fp=${FINAL_POLISH:-2}
lr=${LR:-1.0}
warmup=${WARMUP:-2}
trust=${TRUST:-0.01}
samples=${POLISH_SAMPLES:-20000}
scale=${RESIZED_SCALE:-[0.35, 1.0]}
erasing=${ERASING:-0.5}
arms=${ARMS:-a c}
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(cnn resnet20)
die() { echo "polish_study: error: $*" >&2; exit 1; }
for m in "${models[@]}"; do
  case $m in
    cnn | resnet20) ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown model '$m' (cnn, resnet20)" ;;
  esac
done
for a in $arms; do [ "$a" = a ] || [ "$a" = c ] || die "ARMS holds a and c (the trained arms), not '$a'"; done
for v in ranks batch accumulation fp samples; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "${v^^} must be a whole number, not '${!v}'"
done
[ "$ranks" -ge 1 ] && [ "$batch" -ge 1 ] && [ "$accumulation" -ge 1 ] || die "RANKS, BATCH and ACCUMULATION must be >= 1"
# shellcheck source=scripts/tools.sh
. scripts/tools.sh
hpcnn_launch "$ranks"
launch=("${HPCNN_LAUNCH[@]}")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
py=.venv/bin/python
[ -f build/models/fashion_mnist_cnn.onnx ] || $py scripts/make_train_models.py build/models
log() { echo "polish_study: $(date +%H:%M:%S) $*" >&2; }
t_start=$SECONDS
global=$((ranks * batch * accumulation))

for m in "${models[@]}"; do
  case $m in
    cnn) config=configs/fashion_mnist_cnn.json ;;
    resnet20) config=configs/fashion_mnist_resnet.json ;;
  esac
  v=EPOCHS_$m; default_epochs=20; [ "$m" = cnn ] || default_epochs=12
  epochs=${!v:-$default_epochs}
  dir=$out/$m
  mkdir -p "$dir"
  # The recipe, as dist-train --set overrides of the model's configuration (recorded for the report).
  recipe=(--set "batch_size=$batch" --set "accumulation_steps=$accumulation" --set "epochs=$epochs"
          --set optimizer.type=lars --set "optimizer.trust_coefficient=$trust" --set optimizer.nesterov=false
          --set "lr.base=$lr" --set "lr.base_batch=$global" --set lr.scaling=linear --set "lr.warmup_epochs=$warmup"
          --set lr.decay=cosine --set label_smoothing=0.1
          --set augmentation.crop_padding=0 --set "augmentation.resized_crop_scale=$scale"
          --set augmentation.horizontal_flip=true --set "augmentation.erasing_probability=$erasing")
  $bin/dist-train/dist-train --config "$config" "${recipe[@]}" --set final_polish_epochs=0 --print-config > "$dir/recipe.json.tmp" \
    || { rm -f "$dir/recipe.json.tmp"; die "the recipe does not make a valid dist-train configuration (see above)"; }
  mv "$dir/recipe.json.tmp" "$dir/recipe.json"
  echo "{\"model\": \"$m\", \"epochs\": $epochs, \"final_polish_epochs\": $fp, \"global_batch\": $global, \"ranks\": $ranks, \"polish_samples\": $samples, \"seeds\": \"$seeds\"}" > "$dir/settings.json"
  for s in $seeds; do
    run=$dir/s$s
    mkdir -p "$run"
    init=$out/init-s$s/fashion_mnist_${m/resnet20/resnet}.onnx
    [ -f "$init" ] || $py scripts/make_train_models.py "$out/init-s$s" --seed "$s" > /dev/null
    for arm in $arms; do
      polish=0
      [ "$arm" = a ] || polish=$fp
      if [ ! -f "$run/$arm.onnx" ]; then
        log "$m seed $s: training arm ($arm), final_polish_epochs $polish"
        t=$SECONDS
        # --resume auto: an interrupted training goes on from its last epoch's checkpoint
        "${launch[@]}" $bin/dist-train/dist-train --config "$config" "${recipe[@]}" --set "final_polish_epochs=$polish" \
          --set "seed=$s" --model "$init" -o "$run/$arm.onnx" -f --resume auto --metrics "$run/$arm.metrics.jsonl" --checkpoint "$run/$arm.ckpt" \
          > "$run/$arm.summary.json"
        rm -f "$run/$arm.ckpt"
        echo $((SECONDS - t)) > "$run/$arm.seconds"
      fi
      polished=b
      [ "$arm" = a ] || polished=d
      if [ ! -f "$run/$polished.onnx" ]; then
        log "$m seed $s: bn-polish of ($arm) -> ($polished)"
        t=$SECONDS
        "${launch[@]}" $bin/bn-polish/bn-polish "$run/$arm.onnx" --config "$config" --samples "$samples" \
          -o "$run/$polished.onnx" -f --report "$run/$polished.polish.json" > /dev/null
        echo $((SECONDS - t)) > "$run/$polished.seconds"
      fi
    done
    for f in a b c d; do
      [ -f "$run/$f.onnx" ] || continue
      [ -f "$run/$f.test.json" ] || $bin/dist-train/dist-train --config "$config" --evaluate "$run/$f.onnx" --split test > "$run/$f.test.json"
    done
  done
done
$py studies/polish/report.py "$out"
echo "$((SECONDS - t_start))" >> "$out/wall_seconds"  # one line per run of this script
log "done in $((SECONDS - t_start)) s"
