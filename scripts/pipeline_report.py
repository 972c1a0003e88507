"""The report of a scripts/pipeline.sh run: RUN/report.json, RUN/report.md, RUN/summary.txt and
the plots RUN/curves.png (training and fine-tuning curves from dist-train's metrics),
RUN/kept_channels.png (per-layer output channels before and after pruning) and
RUN/accuracy_vs_params.png (test accuracy against parameters across the steps). It also runs the
final model in onnxruntime over the test set and records its accuracy beside dist-train's.

A regression run (the training configuration's "task": "regression": float targets, MSE loss)
reports the test MAE and MSE where a classification run reports accuracy and loss: the table, the
summary, the curves (validation / test MAE), RUN/mae_vs_params.png in place of
accuracy_vs_params.png, and the onnxruntime check (its test MAE on the volumes normalised as the
configuration says: log1p, mean, std; 5-D [N, C, D, H, W] or channels-last) beside dist-train's,
within a relative 1e-4.

  .venv/bin/python scripts/pipeline_report.py RUN [--bin build/tools] [--pipeline-seconds S]
"""
import argparse
import glob
import gzip
import io
import json
import os
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

STEPS = [  # (name, model file relative to RUN, what it is)
    ("train", "1-train/model.onnx", "trained"),
    ("prune", "2-prune/final.onnx", "pruned + fine-tuned (loop)"),
    ("sparsify", "3-sparsify/model.onnx", "sparse FCL, before fine-tuning"),
    ("finetune", "4-finetune/model.onnx", "sparse FCL, fine-tuned"),
    ("polish", "5-polish/model.onnx", "BatchNorm statistics polished"),
]


def load(path, default=None):
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def tool_path(bin_dir, name):
    """A tool in a build tree's tools/ (NAME/NAME) or a bin/ (NAME), as scripts/tools.sh finds them."""
    for p in (os.path.join(bin_dir, name, name), os.path.join(bin_dir, name)):
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return os.path.join(bin_dir, name, name)


def file_bytes(path, bin_dir):
    """The bytes of a data file with its compression undone (huffgpu, gzip), and its name without
    .huf/.gz (the name decides CIFAR-10 binary, as in lib/data/format.h)."""
    with open(path, "rb") as f:
        data = f.read()
    name = os.path.basename(path)
    if data[:4] == b"HUFG":
        data = subprocess.run([tool_path(bin_dir, "huffgpu-decode"), "-c", path],
                              capture_output=True, check=True).stdout
        name = name[:-4] if name.endswith(".huf") else name
    elif data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
        name = name[:-3] if name.endswith(".gz") else name
    return data, name


def read_idx(data):
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def read_images(path, bin_dir):
    """Images as the dist-train loader reads them (lib/data: IDX (N, H, W); NPY (N, H, W),
    (N, C, H, W) or channels-last (N, H, W, C) when the last dim is 1, 3 or 4 and dim 1 is not,
    uint8 or float; CIFAR-10 binary by its .bin name, 3073-byte records), each possibly gzip- or
    huffgpu-compressed: (NCHW array, u8 or float32; labels for CIFAR-10, else None)."""
    data, name = file_bytes(path, bin_dir)
    if data[:6] == b"\x93NUMPY":
        a = np.load(io.BytesIO(data), allow_pickle=False)
        if a.ndim == 3:
            a = a[:, None]
        elif a.ndim in (4, 5) and a.shape[-1] in (1, 3, 4) and a.shape[1] not in (1, 3, 4):
            a = np.moveaxis(a, -1, 1)  # channels-last images [N, H, W, C] or volumes [N, D, H, W, C]
        elif a.ndim not in (4, 5):
            raise ValueError(f"{path}: images of shape {a.shape}")
        return (a if a.dtype == np.uint8 else a.astype(np.float32)), None
    if name.endswith(".bin"):
        rec = np.frombuffer(data, np.uint8).reshape(-1, 3073)
        return rec[:, 1:].reshape(-1, 3, 32, 32), rec[:, 0].astype(np.int64)
    return read_idx(data)[:, None], None


def read_labels(path, bin_dir):
    data, _ = file_bytes(path, bin_dir)
    if data[:6] == b"\x93NUMPY":
        return np.load(io.BytesIO(data), allow_pickle=False).astype(np.int64)
    return read_idx(data).astype(np.int64)


def read_targets(path, bin_dir):
    """Regression targets: a float .npy [N, K] (or [N]), possibly compressed, as float64."""
    data, _ = file_bytes(path, bin_dir)
    t = np.load(io.BytesIO(data), allow_pickle=False).astype(np.float64)
    return t.reshape(len(t), -1)


def normalised(images, mean, std, log1p=False):
    """(v - mean[c]) / std[c], one value or one per channel (data/augment.h), v = x / 255 for uint8
    pixels, x as stored for others; log(1 + x) for any type with log1p. Images [N, C, H, W] or
    volumes [N, C, D, H, W]."""
    c = images.shape[1]
    shape = (1, c) + (1,) * (images.ndim - 2)
    m = np.asarray(mean if len(mean) > 1 else mean * c, np.float32).reshape(shape)
    s = np.asarray(std if len(std) > 1 else std * c, np.float32).reshape(shape)
    x = images.astype(np.float32)
    if log1p:
        x = np.log1p(x)
    elif images.dtype == np.uint8:
        x = x / np.float32(255)
    return ((x - m) / s).astype(np.float32)


def onnxruntime_accuracy(model, cfg, bin_dir):
    """(test accuracy in onnxruntime, None), or (None, why the check was skipped). Regression: the
    test MAE and MSE ({"mae", "mse"}) in place of the accuracy."""
    regression = cfg.get("task") == "regression"
    images, labels = read_images(cfg["data"]["test_images"], bin_dir)
    if regression:
        labels = read_targets(cfg["data"]["test_labels"], bin_dir)
    elif labels is None:
        labels = read_labels(cfg["data"]["test_labels"], bin_dir)
    aug = cfg.get("augmentation", {})
    x = normalised(images, aug.get("mean") or [0.0], aug.get("std") or [1.0], bool(aug.get("log1p")))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 (onnxruntime's own exception types)
        if "IR version" not in str(e):
            raise
        # A model newer than this onnxruntime reads (onnx 1.19 writes IR 12 by default; onnxruntime
        # 1.23 reads up to 11): the tools read it, the independent check cannot.
        return None, f"skipped: onnxruntime {ort.__version__} cannot read the model ({str(e).strip()})"
    name = sess.get_inputs()[0].name
    if regression:
        err = np.concatenate([sess.run(None, {name: x[i:i + 500]})[0].astype(np.float64).reshape(len(x[i:i + 500]), -1)
                              for i in range(0, len(x), 500)]) - labels
        return {"mae": float(np.abs(err).mean()), "mse": float((err ** 2).mean())}, None
    correct = 0
    for i in range(0, len(x), 500):
        logits = sess.run(None, {name: x[i:i + 500]})[0]
        correct += int((logits.argmax(1) == labels[i:i + 500]).sum())
    return correct / len(x), None


def out_channels(path):
    """Output channels of each Conv / Gemm node (weight dim 0; Gemm with transB=1), by node name."""
    m = onnx.load(path)
    dims = {t.name: list(t.dims) for t in m.graph.initializer}
    out = {}
    for n in m.graph.node:
        if n.op_type in ("Conv", "Gemm") and len(n.input) > 1 and n.input[1] in dims:
            trans_b = any(a.name == "transB" and a.i for a in n.attribute)
            w = dims[n.input[1]]
            out[n.name or n.output[0]] = w[0] if n.op_type == "Conv" or trans_b else w[-1]
    return out


def wall(seconds):
    return "-" if seconds is None else f"{seconds:,.0f} s"


def version(bin_dir, tool):
    try:
        return subprocess.run([tool_path(bin_dir, tool), "--version"], capture_output=True, text=True,
                              timeout=60).stdout.strip()
    except OSError:
        return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "tools"))
    ap.add_argument("--pipeline-seconds", type=float, default=None)
    a = ap.parse_args()
    run = a.run
    cfg = load(os.path.join(run, "train.json"))
    regression = cfg.get("task") == "regression"
    steps, skipped = [], []
    for name, rel, what in STEPS:
        e = load(os.path.join(run, "eval", f"{name}.json"))
        s = load(os.path.join(run, "steps", f"{name}.json"), {})
        marker = os.path.join(run, "steps", f"{name}.skipped")
        if os.path.exists(marker):  # the step did not apply (pipeline.sh's skip): listed with its reason
            with open(marker) as f:
                skipped.append({"step": name, "reason": f.read().strip()})
            continue
        if e is None:
            continue
        # dist-train --evaluate's measures: test accuracy and loss; regression: test mae, mse, mae_per_target
        measures = {"test_mae": e["mae"], "test_mse": e["mse"], "test_mae_per_target": e["mae_per_target"]} if regression \
            else {"test_accuracy": e["test_accuracy"], "test_loss": e["test_loss"]}
        steps.append({"step": name, "what": what, "model": os.path.join(run, rel), "command": s.get("command"),
                      "seconds": s.get("seconds"), "parameters": e["parameters"], "macs": e["macs"],
                      "model_bytes": e["model_bytes"], **measures, "images_per_second": e["images_per_second"]})
    data = []
    for path in sorted(glob.glob(os.path.join(run, "steps", "data-*.json"))):
        s = load(path)
        shard = s["output"]
        src = s["inputs"][0]
        data.append({"key": s["step"][5:], "source": src, "source_bytes": os.path.getsize(src), "shard": shard,
                     "shard_bytes": os.path.getsize(shard), "seconds": s["seconds"], "command": s["command"]})
    settings = {}
    try:
        settings["git_commit"] = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse",
                                                 "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        settings["git_commit"] = "unknown"
    settings["tools"] = {t: version(a.bin, t) for t in ("dist-train", "prune-rate", "sparsify-fcl", "bn-polish",
                                                          "huffgpu-encode")}
    settings["seed"] = cfg.get("seed")
    final = steps[-1] if steps else None
    check = {}
    if final:
        accuracy, skipped_why = onnxruntime_accuracy(final["model"], cfg, a.bin)
        if regression:
            check = {"model": final["model"], "onnxruntime_test_mae": accuracy and accuracy["mae"],
                     "onnxruntime_test_mse": accuracy and accuracy["mse"],
                     "dist_train_test_mae": final["test_mae"], "dist_train_test_mse": final["test_mse"]}
        else:
            check = {"model": final["model"], "onnxruntime_test_accuracy": accuracy,
                     "dist_train_test_accuracy": final["test_accuracy"]}
        if skipped_why:
            print(f"pipeline_report: warning: the onnxruntime check is {skipped_why}", file=sys.stderr)
            check = {"model": final["model"], "skipped": skipped_why}
    report = {"run": os.path.abspath(run), "task": "regression" if regression else "classification", "steps": steps, "skipped": skipped, "data": data, "settings": settings,
              "onnxruntime_check": check, "pipeline_seconds": a.pipeline_seconds}
    prune_summary = load(os.path.join(run, "2-prune", "summary.json"))
    skipped_names = {x["step"] for x in skipped}
    fcl = None if "sparsify" in skipped_names else load(os.path.join(run, "3-sparsify", "report.json"))
    polish = None if "polish" in skipped_names else load(os.path.join(run, "5-polish", "report.json"))
    if prune_summary:
        report["prune"] = prune_summary
    if fcl:
        report["sparsify"] = {k: fcl[k] for k in ("layer", "structure", "rank", "init", "layer_compression",
                                                  "model_compression", "init_relative_error") if k in fcl}
    if polish:
        report["polish"] = {k: polish[k] for k in ("samples", "passes", "seconds")}

    # Plots. Curves on one epoch axis through the phases: training, the prune loop's fine-tunings
    # (validation accuracy: the loop holds the test set out), fine-tuning after sparsify-fcl.
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    phases = [("training", lines(os.path.join(run, "1-train", "metrics.jsonl")), "test", "C0")]
    loop = sorted(glob.glob(os.path.join(run, "2-prune", "it*", "metrics.jsonl")),
                  key=lambda p: int(os.path.basename(os.path.dirname(p))[2:]))
    for i, path in enumerate(loop):
        phases.append(("prune loop fine-tuning" if i == 0 else None, lines(path), "validation", "C1"))
    phases.append(("fine-tuning after sparsify-fcl", lines(os.path.join(run, "4-finetune", "metrics.jsonl")), "test", "C2"))
    x0 = 0
    for label, m, split, colour in phases:
        if not m:
            continue
        xs = [x0 + x["epoch"] for x in m]
        acc = [x.get(f"{split}_mae", float("nan")) for x in m] if regression else \
            [100 * x.get(f"{split}_accuracy", float("nan")) for x in m]
        ax[0].plot(xs, acc, marker="o", color=colour, label=f"{label} ({split})" if label else None)
        ax[1].plot(xs, [x["train_loss"] for x in m], marker="o", color=colour, label=f"{label}: train" if label else None)
        if f"{split}_loss" in m[0]:
            ax[1].plot(xs, [x[f"{split}_loss"] for x in m], marker="x", linestyle="--", color=colour,
                       label=f"{label}: {split}" if label else None)
        for a in ax:
            a.axvline(x0 + 0.5, color="grey", alpha=0.2)
        x0 = xs[-1]
    for a, name in zip(ax, ("MAE" if regression else "accuracy (%)", "loss (MSE)" if regression else "loss")):
        a.set_xlabel("epoch (all phases, in order)")
        a.set_ylabel(name)
        a.legend(fontsize=7)
        a.grid(alpha=0.3)
    fig.suptitle("dist-train curves: training, the prune loop's fine-tunings, fine-tuning after sparsify-fcl")
    fig.tight_layout()
    fig.savefig(os.path.join(run, "curves.png"), dpi=110)
    plt.close(fig)

    before = out_channels(os.path.join(run, "1-train", "model.onnx")) if steps else {}
    after = out_channels(os.path.join(run, "2-prune", "final.onnx")) if os.path.exists(os.path.join(run, "2-prune", "final.onnx")) else {}
    fig, ax = plt.subplots(figsize=(8, 4))
    names = [n for n in before if n in after]
    xs = np.arange(len(names))
    ax.bar(xs - 0.2, [before[n] for n in names], 0.4, label="trained")
    ax.bar(xs + 0.2, [after[n] for n in names], 0.4, label="after the prune loop")
    ax.set_xticks(xs, names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("output channels / neurons")
    ax.set_title("kept channels per layer (prune-rate, data-driven thresholds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(run, "kept_channels.png"), dpi=110)
    plt.close(fig)
    report["kept_channels"] = {n: {"before": before[n], "after": after[n]} for n in names}
    with open(os.path.join(run, "report.json"), "w") as f:
        json.dump(report, f, indent=1)

    # The test measure of each step: accuracy (%), or the MAE of a regression run.
    measure = (lambda s: s["test_mae"]) if regression else (lambda s: 100 * s["test_accuracy"])  # noqa: E731
    shown = (lambda s: f"MAE {s['test_mae']:.4g}") if regression else (lambda s: f"{100 * s['test_accuracy']:.2f}%")  # noqa: E731
    plot_name = "mae_vs_params.png" if regression else "accuracy_vs_params.png"
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.plot([s["parameters"] for s in steps], [measure(s) for s in steps], "-o")
    run_length = 0
    for i, s in enumerate(steps):
        # Steps at the same size (sparsify, fine-tuning, polishing) would print over each other:
        # each further one at the same parameter count goes a line lower.
        run_length = run_length + 1 if i > 0 and steps[i - 1]["parameters"] == s["parameters"] else 0
        ax.annotate(f"{s['step']} {shown(s)}", (s["parameters"], measure(s)),
                    textcoords="offset points", xytext=(6, 5 - 11 * run_length), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("parameters (log scale)")
    ax.set_ylabel("test MAE (lower is better)" if regression else "test accuracy (%)")
    ax.set_title(f"the pipeline's steps: {'MAE' if regression else 'accuracy'} against size")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(run, plot_name), dpi=110)
    plt.close(fig)

    # Markdown and the short terminal summary.
    columns = ("test MAE", "test MSE") if regression else ("test accuracy", "test loss")
    head = (f"| step | model | parameters | MACs | file | {columns[0]} | {columns[1]} | images/s | wall time |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    cells = (lambda s: f"{s['test_mae']:.4f} | {s['test_mse']:.4f}") if regression else \
        (lambda s: f"{100 * s['test_accuracy']:.2f}% | {s['test_loss']:.4f}")  # noqa: E731
    rows = "".join(f"| {s['step']} | {s['what']} | {s['parameters']:,} | {s['macs']:,} | {s['model_bytes'] / 1e6:.2f} MB | "
                   f"{cells(s)} | {s['images_per_second']:,.0f} | "
                   f"{wall(s['seconds'])} |\n" for s in steps)
    md = [f"# Pipeline run {os.path.abspath(run)}\n", head + rows]
    for x in skipped:
        md.append(f"\nSkipped: {x['step']}: {x['reason']}\n")
    if data:
        md.append("\nData: the files as given -> their huffgpu shards (huffgpu-encode of the "
                  "decompressed bytes): " + ", ".join(
                      f"{d['key']} {d['source_bytes']:,} -> {d['shard_bytes']:,} bytes" for d in data) + "\n")
    if check.get("skipped"):
        md.append(f"\nonnxruntime on the final model: {check['skipped']}\n")
    elif check and regression:
        md.append(f"\nonnxruntime on the final model: test MAE {check['onnxruntime_test_mae']:.6f}, MSE "
                  f"{check['onnxruntime_test_mse']:.6f} (dist-train: MAE {check['dist_train_test_mae']:.6f}, MSE "
                  f"{check['dist_train_test_mse']:.6f})\n")
    elif check:
        md.append(f"\nonnxruntime on the final model: test accuracy {100 * check['onnxruntime_test_accuracy']:.2f}% "
                  f"(dist-train: {100 * check['dist_train_test_accuracy']:.2f}%)\n")
    md.append(f"\nCommit {settings['git_commit']}, seed {settings['seed']}; tools: "
              + ", ".join(settings["tools"].values()) + "\n")
    md.append(f"\n![curves](curves.png)\n\n![kept channels](kept_channels.png)\n\n"
              f"![{'MAE' if regression else 'accuracy'} vs parameters]({plot_name})\n")
    with open(os.path.join(run, "report.md"), "w") as f:
        f.write("".join(md))
    # The closing table on the terminal: a header, one line per step, the overall change, the
    # skipped steps and what to do next.
    lines_ = [f"pipeline: summary of {os.path.abspath(run)}"]
    if regression:
        lines_.append(f"  {'step':9s} {'parameters':>12s} {'MACs':>14s} {'test MAE':>10s} {'test MSE':>10s} {'images/s':>9s}")
        lines_ += [f"  {s['step']:9s} {s['parameters']:>12,} {s['macs']:>14,} {s['test_mae']:>10.4f} {s['test_mse']:>10.4f} "
                   f"{s['images_per_second']:>9,.0f}" for s in steps]
    else:
        lines_.append(f"  {'step':9s} {'parameters':>12s} {'MACs':>14s} {'test accuracy':>14s} {'images/s':>9s}")
        lines_ += [f"  {s['step']:9s} {s['parameters']:>12,} {s['macs']:>14,} {100 * s['test_accuracy']:>13.2f}% "
                   f"{s['images_per_second']:>9,.0f}" for s in steps]
    if len(steps) > 1 and regression:
        a, b = steps[0], steps[-1]
        lines_.append(f"  overall: {a['parameters'] / max(b['parameters'], 1):.1f}x fewer parameters, "
                      f"{a['macs'] / max(b['macs'], 1):.2f}x fewer MACs, test MAE {a['test_mae']:.4f} -> {b['test_mae']:.4f} "
                      f"({100 * (b['test_mae'] / a['test_mae'] - 1) if a['test_mae'] else float('nan'):+.1f}%)")
    elif len(steps) > 1:
        a, b = steps[0], steps[-1]
        lines_.append(f"  overall: {a['parameters'] / max(b['parameters'], 1):.1f}x fewer parameters, "
                      f"{a['macs'] / max(b['macs'], 1):.2f}x fewer MACs, test accuracy {100 * a['test_accuracy']:.2f}% -> "
                      f"{100 * b['test_accuracy']:.2f}% ({100 * (b['test_accuracy'] - a['test_accuracy']):+.2f} points)")
    lines_ += [f"  skipped: {x['step']}: {x['reason']}" for x in skipped]
    if final:
        lines_.append(f"  next: the final model is {final['model']}; the report {os.path.join(os.path.abspath(run), 'report.md')}; "
                      f"more fine-tuning: dist-train --config {os.path.join(os.path.abspath(run), 'train.json')} --model "
                      f"{final['model']} --fine-tune --epochs N -o tuned.onnx")
    with open(os.path.join(run, "summary.txt"), "w") as f:
        f.write("\n".join(lines_) + "\n")
    if check.get("onnxruntime_test_mae") is not None and \
            abs(check["onnxruntime_test_mae"] - check["dist_train_test_mae"]) > 1e-4 * abs(check["dist_train_test_mae"]) + 1e-7:
        print(f"pipeline_report: error: onnxruntime's test MAE {check['onnxruntime_test_mae']!r} differs from "
              f"dist-train's {check['dist_train_test_mae']!r} by more than a relative 1e-4", file=sys.stderr)
        sys.exit(1)
    if check.get("onnxruntime_test_accuracy") is not None and abs(check["onnxruntime_test_accuracy"] - check["dist_train_test_accuracy"]) > 0.005:
        print(f"pipeline_report: error: onnxruntime's test accuracy {check['onnxruntime_test_accuracy']:.4f} differs from "
              f"dist-train's {check['dist_train_test_accuracy']:.4f} by more than 0.5 points", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
