#!/usr/bin/env python3
"""Per-rank parameter + optimizer memory of dist-train with compact optimizer state (issue 45):
ResNet-20 and the VGG-like model of make_train_models.py, dense and with 80% / 90% of every
Conv/Gemm weight zeroed by `prune-rate --unstructured R`, trained for a few steps on one rank with
`sparse: true` (the zeros at start are the fixed mask) against the dense layout of the unpruned
model. The bytes per category are dist-train's own count (the summary's parameter_memory, the
live buffers' sizes); the peak RSS is /usr/bin/time's "Maximum resident set size" of the run.
The training files are decompressed once into WORKDIR: read from .gz, the peak RSS would be the
decompression's, before the first step, and hide the optimizer's share.
Prints a Markdown table (the one in docs/compact-state.md).

Each case runs --repeat times (default 3): the bytes are the same every time (checked); the peak
RSS is given as the median and the range (glibc's reuse of freed blocks moves it by a few MiB).

Usage: compact_state_memory.py WORKDIR [--steps 4] [--batch 32] [--repeat 3]
"""
import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hpcnn_tools import tool  # noqa: E402

FM = "/usr/share/datasets/fashion-mnist"


def raw_data(work):
    """Fashion-MNIST's training images and labels as raw IDX files in `work`."""
    out = {}
    for key, name in (("train_images", "train-images-idx3-ubyte"), ("train_labels", "train-labels-idx1-ubyte")):
        path = os.path.join(work, name)
        if not os.path.exists(path):
            with gzip.open(f"{FM}/{name}.gz", "rb") as src, open(path + ".tmp", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(path + ".tmp", path)
        out[key] = path
    return out


def run_repeated(work, model, sparse, steps, batch, repeat):
    """(parameter_memory, [peak RSS KiB of each run]); the bytes must not vary."""
    runs = [run_case(work, model, sparse, steps, batch) for _ in range(repeat)]
    if any(m != runs[0][0] for m, _ in runs):
        sys.exit(f"parameter_memory of {model} varies between runs: {[m for m, _ in runs]}")
    return runs[0][0], sorted(r for _, r in runs)


def run_case(work, model, sparse, steps, batch):
    tag = os.path.splitext(os.path.basename(model))[0] + ("_sparse" if sparse else "_dense")
    cfg = {"model": model, "data": raw_data(work),
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
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([sys.executable, os.path.join(here, "make_train_models.py"), a.workdir], check=True, capture_output=True)
    mib = lambda b: f"{b / 2**20:.3f}"  # noqa: E731
    print("| model | zeros | weights | gradients | fused buffer | state | positions | optimizer (fused+state+positions) "
          "| state+positions / dense state | peak RSS (MiB): median [min, max] |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in ("fashion_mnist_resnet", "fashion_mnist_vgg"):
        dense_model = os.path.join(a.workdir, name + ".onnx")
        dense_mem, dense_rss = run_repeated(a.workdir, dense_model, False, a.steps, a.batch, a.repeat)
        rows = [("0% (dense)", dense_mem, dense_rss)]
        for rate in (0.8, 0.9):
            pruned = os.path.join(a.workdir, f"{name}_{int(rate * 100)}.onnx")
            subprocess.run([tool("prune-rate"), dense_model, "--unstructured", str(rate), "-o", pruned, "-f"], check=True,
                           capture_output=True)
            mem, rss = run_repeated(a.workdir, pruned, True, a.steps, a.batch, a.repeat)
            rows.append((f"{int(rate * 100)}%", mem, rss))
        for zeros, m, rss in rows:
            ratio = (m["state"] + m["positions"]) / dense_mem["state"]
            print(f"| {name} | {zeros} | {mib(m['weights'])} | {mib(m['gradients'])} | {mib(m['fused'])} | {mib(m['state'])} "
                  f"| {mib(m['positions'])} | {mib(m['optimizer'])} | {ratio:.3f} "
                  f"| {rss[len(rss) // 2] / 1024:.1f} [{rss[0] / 1024:.1f}, {rss[-1] / 1024:.1f}] |")
    print(f"\nBytes in MiB (2^20); one rank; the summary's parameter_memory; {a.repeat} runs of {a.steps} steps of batch {a.batch}.")


if __name__ == "__main__":
    main()
