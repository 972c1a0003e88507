#!/usr/bin/env python3
"""A trained CosmoFlow ONNX model on a cosmology data set's test split, computed by onnxruntime (a
second runtime, not ours): per target the MAE and the Pearson correlation r of prediction and target
(the issue's sigma_8 goal: r >= 0.95), overall MAE, and the same figures of the summary-statistic
baseline (scripts/data/cosmo_baseline.py) beside them.

The input is prepared as dist-train's regression loader does for configs/cosmoflow: log1p of the
counts, then (x - mean) / std per channel with the config's `augmentation.mean` / `std`.

Usage: evaluate_onnx.py MODEL.onnx CONFIG.json DATA_DIR    (stdout: JSON)
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort

TARGETS = ("Omega_m", "sigma_8", "n_s", "h")


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: evaluate_onnx.py MODEL.onnx CONFIG.json DATA_DIR")
    try:
        evaluate(*sys.argv[1:])
    except Exception as e:  # a missing or malformed model, config or data set; onnxruntime's own errors
        print(f"evaluate_onnx: error: {e}", file=sys.stderr)
        sys.exit(2)


def evaluate(model, config, data):
    aug = json.load(open(config)).get("augmentation", {})
    if "mean" not in aug or "std" not in aug:
        raise ValueError(f"{config}: no augmentation.mean and augmentation.std (a configs/cosmoflow training config)")
    mean = np.float32(aug["mean"])[None, :, None, None, None]
    std = np.float32(aug["std"])[None, :, None, None, None]
    volumes = np.load(os.path.join(data, "test_volumes.npy"), mmap_mode="r")
    targets = np.load(os.path.join(data, "test_targets.npy")).astype(np.float64)
    session = ort.InferenceSession(model)
    name = session.get_inputs()[0].name
    preds = []
    for i in range(0, len(volumes), 50):
        x = (np.log1p(np.asarray(volumes[i:i + 50], dtype=np.float32)) - mean) / std
        preds.append(session.run(None, {name: x.astype(np.float32)})[0])
    pred = np.concatenate(preds).astype(np.float64)
    err = np.abs(pred - targets)
    here = os.path.dirname(os.path.abspath(__file__))
    baseline = json.loads(subprocess.run([sys.executable, os.path.join(here, "../../scripts/data/cosmo_baseline.py"), data],
                                         check=True, capture_output=True, text=True).stdout)
    out = {
        "model": model, "samples": len(targets), "targets": list(TARGETS),
        "mae": float(err.mean()),
        "mae_per_target": err.mean(axis=0).tolist(),
        "correlation": [float(np.corrcoef(pred[:, k], targets[:, k])[0, 1]) for k in range(targets.shape[1])],
        "baseline_mae": baseline["mae"], "baseline_mae_per_target": baseline["mae_per_target"],
        "baseline_correlation": baseline["correlation"],
    }
    out["mae_against_baseline"] = out["mae"] / baseline["mae"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
