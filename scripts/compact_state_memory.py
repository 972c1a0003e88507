#!/usr/bin/env python3
"""Per-rank parameter + optimizer memory of dist-train with compact optimizer state (issue 45):
ResNet-20 and the VGG-like model of make_train_models.py, dense and with 80% / 90% of every
Conv/Gemm weight zeroed by `prune-rate --unstructured R`, trained for a few steps on one rank with
`sparse: true` (the zeros at start are the fixed mask) against the dense layout of the unpruned
model. The bytes per category are dist-train's own count (the summary's parameter_memory, the
live buffers' sizes); the peak RSS is /usr/bin/time's "Maximum resident set size" of the run.
Prints a Markdown table (the one in docs/compact-state.md).

Usage: compact_state_memory.py WORKDIR [--steps 4] [--batch 32]
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hpcnn_tools import tool  # noqa: E402

FM = "/usr/share/datasets/fashion-mnist"


def run_case(work, model, sparse, steps, batch):
    tag = os.path.splitext(os.path.basename(model))[0] + ("_sparse" if sparse else "_dense")
    cfg = {"model": model, "data": {"train_images": f"{FM}/train-images-idx3-ubyte.gz",
                                     "train_labels": f"{FM}/train-labels-idx1-ubyte.gz"},
           "augmentation": {"crop_padding": 2, "horizontal_flip": True, "mean": [0.286], "std": [0.353]},
           "epochs": 1, "batch_size": batch, "max_steps_per_epoch": steps, "final_polish_epochs": 0,
           "optimizer": {"type": "sgd", "momentum": 0.9, "weight_decay": 5e-4}, "lr": {"base": 0.05},
           "threads": 1, "seed": 1, "sparse": sparse}
    path = os.path.join(work, tag + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    p = subprocess.run(["/usr/bin/time", "-v", tool("dist-train"), "--config", path], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode != 0:
        sys.exit(f"dist-train failed on {path}:\n{p.stderr}")
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    rss_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    return summary["parameter_memory"], rss_kib


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workdir")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([sys.executable, os.path.join(here, "make_train_models.py"), a.workdir], check=True, capture_output=True)
    mib = lambda b: f"{b / 2**20:.3f}"  # noqa: E731
    print("| model | zeros | weights | gradients | fused buffer | state | positions | optimizer (fused+state+positions) "
          "| state+positions / dense state | peak RSS (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in ("fashion_mnist_resnet", "fashion_mnist_vgg"):
        dense_model = os.path.join(a.workdir, name + ".onnx")
        dense_mem, dense_rss = run_case(a.workdir, dense_model, False, a.steps, a.batch)
        rows = [("0% (dense)", dense_mem, dense_rss)]
        for rate in (0.8, 0.9):
            pruned = os.path.join(a.workdir, f"{name}_{int(rate * 100)}.onnx")
            subprocess.run([tool("prune-rate"), dense_model, "--unstructured", str(rate), "-o", pruned, "-f"], check=True,
                           capture_output=True)
            mem, rss = run_case(a.workdir, pruned, True, a.steps, a.batch)
            rows.append((f"{int(rate * 100)}%", mem, rss))
        for zeros, m, rss in rows:
            ratio = (m["state"] + m["positions"]) / dense_mem["state"]
            print(f"| {name} | {zeros} | {mib(m['weights'])} | {mib(m['gradients'])} | {mib(m['fused'])} | {mib(m['state'])} "
                  f"| {mib(m['positions'])} | {mib(m['optimizer'])} | {ratio:.3f} | {rss / 1024:.1f} |")
    print("\nBytes in MiB (2^20); one rank; the summary's parameter_memory.")


if __name__ == "__main__":
    main()
