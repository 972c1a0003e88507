#!/usr/bin/env bash
# The CosmoFlow-32^3 comparison of studies/cosmoflow/README.md: dist-train under mpirun (2 ranks x
# batch 4) and the PyTorch twin (bench/cosmoflow_torch.py, batch 8: the same global batch) on
# out/cosmo32, the same recipe (SGD momentum 0.9, peak lr 0.005 = 0.04 x 8 / 64, 1 warm-up epoch,
# cosine to 0, log1p + mean/std, random flips and axis permutations), from the same initial ONNX
# weights, one run per seed and engine, in out/cosmo_runs/. Prints one line per run.
#   SEEDS   default "1 2 3";  EPOCHS  default 8;  ENGINES  default "ours torch"
# Needs: the build (build/tools), out/cosmo32 (scripts/data/cosmo_volumes.py --out out/cosmo32
# --samples 4000 --test-samples 500 --size 32), out/cosmoflow_models/cosmoflow_32_k3.onnx
# (configs/cosmoflow/make_models.py out/cosmoflow_models --sizes 32) and .venv-torch (see
# configs/cosmoflow/README.md). About 35 minutes per run on the 2-core machine.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$here"
runs=out/cosmo_runs
model=out/cosmoflow_models/cosmoflow_32_k3.onnx
mkdir -p "$runs"
for seed in ${SEEDS:-1 2 3}; do
  for engine in ${ENGINES:-ours torch}; do
    if [ "$engine" = ours ]; then
      d=$runs/ours_a_s$seed
      mkdir -p "$d"
      mpirun --allow-run-as-root -np 2 build/tools/dist-train/dist-train --config configs/cosmoflow/cosmoflow_32.json \
        --model "$model" -o "$d/trained.onnx" --metrics "$d/metrics.jsonl" --checkpoint "$d/ckpt" -f \
        --epochs "${EPOCHS:-8}" --threads 1 --set lr.base=0.04 --set lr.warmup_epochs=1 --set lr.decay=cosine \
        --set seed="$seed" >"$d/summary.json" 2>"$d/log.txt"
      python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('ours  seed', sys.argv[2], 'test MAE', round(s['test_mae'], 4), [round(x, 3) for x in s['test_mae_per_target']])" "$d/summary.json" "$seed"
    else
      f=$runs/torch_a_s$seed.jsonl
      .venv-torch/bin/python bench/cosmoflow_torch.py train --data out/cosmo32 --onnx "$model" --epochs "${EPOCHS:-8}" \
        --batch-size 8 --lr 0.04 --base-batch 64 --warmup-epochs 1 --threads 1 --seed "$seed" >"$f"
      python3 -c "import json,sys; s=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print('torch seed', sys.argv[2], 'test MAE', round(s['test_mae'], 4), [round(x, 3) for x in s['test_mae_per_target']])" "$f" "$seed"
    fi
  done
done
