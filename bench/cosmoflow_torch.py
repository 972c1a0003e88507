#!/usr/bin/env python3
"""The CosmoFlow reference network (configs/cosmoflow/make_models.py) as a native PyTorch module:
the PyTorch side of the CosmoFlow comparisons (issue 42 item 7). Runs in .venv-torch (PyTorch 2.x
CPU, numpy, onnx, onnxruntime; see configs/cosmoflow/README.md).

  check MODEL.onnx [--batch N]      loads the ONNX file's initializers into the module (by name) and
                                    compares its eval-mode output with onnxruntime's (max |diff| <= 1e-4)
  train --data DIR [--onnx MODEL]   trains with the reference recipe on DIR/{train,test}_{volumes,targets}.npy
                                    (scripts/data/cosmo_volumes.py); one JSON line per epoch on stdout
  throughput                        training samples/s at batch 4 and 16, 1 and 2 threads,
                                    channels_last_3d, 32^3 and 64^3 models; peak RSS; JSON lines
  step [--size 128 --batch 1]       the time of one training step (after --warmup steps; median of
                                    --steps), channels_last_3d; peak RSS; one JSON line

The module's parameter names are the ONNX initializer names (conv1.weight, ..., fc3.bias).
"""
import argparse
import json
import math
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# log1p(count) statistics per channel of out/cosmo32's 4,000 training samples (configs/cosmoflow/cosmoflow_32.json)
MEAN = [0.5176, 0.5403, 0.5836, 0.6318]
STD = [0.5483, 0.5247, 0.4627, 0.3581]


class CosmoFlow(nn.Module):
    """mlcommons/hpc cosmoflow/models/cosmoflow.py build_model, channels first: L = log2(S) - 2 blocks of
    Conv3d(32*2^i, k, SAME, bias) -> LeakyReLU(0.3) -> MaxPool3d(2); Flatten; Linear 128 -> LeakyReLU ->
    Dropout 0.5; Linear 64 -> LeakyReLU -> Dropout 0.5; Linear 4 -> Tanh -> x1.2."""

    def __init__(self, size=32, k=3, dropout=0.5):
        super().__init__()
        self.L = int(round(math.log2(size))) - 2
        assert 2 ** (self.L + 2) == size and self.L >= 1, size
        self.k = k
        # SAME for stride 1: (k-1)//2 voxels before, the rest after (SAME_UPPER; k=2: 0 before, 1 after)
        self.pad = [(k - 1) // 2, k - 1 - (k - 1) // 2] * 3
        cin = 4
        for i in range(self.L):
            setattr(self, f"conv{i + 1}", nn.Conv3d(cin, 32 * 2 ** i, k, padding=0, bias=True))
            cin = 32 * 2 ** i
        self.fc1 = nn.Linear(cin * 4 ** 3, 128)
        self.fc2 = nn.Linear(128, 64)
        self.fc3 = nn.Linear(64, 4)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        for i in range(self.L):
            x = F.pad(x, self.pad)
            x = F.max_pool3d(F.leaky_relu(getattr(self, f"conv{i + 1}")(x), 0.3), 2)
        x = torch.flatten(x, 1)
        x = self.drop(F.leaky_relu(self.fc1(x), 0.3))
        x = self.drop(F.leaky_relu(self.fc2(x), 0.3))
        return torch.tanh(self.fc3(x)) * 1.2


def model_shape(path):
    """(S, k) of one of our ONNX files, from its input shape and conv1's weight."""
    import onnx
    m = onnx.load(path)
    size = m.graph.input[0].type.tensor_type.shape.dim[2].dim_value
    k = next(t.dims[2] for t in m.graph.initializer if t.name == "conv1.weight")
    return size, k


def load_onnx(module, path):
    """Copies the initializers of the ONNX model at `path` into `module`'s parameters of the same name;
    every parameter must be found with the same shape (else ValueError). Returns the module."""
    import onnx
    from onnx import numpy_helper
    inits = {t.name: t for t in onnx.load(path).graph.initializer}
    state = module.state_dict()
    for name, p in state.items():
        if name not in inits:
            raise ValueError(f"{path}: no initializer '{name}'")
        a = numpy_helper.to_array(inits[name])
        if tuple(a.shape) != tuple(p.shape):
            raise ValueError(f"{path}: initializer '{name}' has shape {a.shape}, the module {tuple(p.shape)}")
        state[name] = torch.from_numpy(a.copy())
    module.load_state_dict(state)
    return module


def cmd_check(a):
    import onnxruntime as ort
    size, k = model_shape(a.model)
    m = load_onnx(CosmoFlow(size, k), a.model).eval()
    x = np.random.default_rng(a.seed).standard_normal((a.batch, 4, size, size, size)).astype(np.float32)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    with torch.no_grad():
        out = m(torch.from_numpy(x)).numpy()
    diff = float(np.abs(out - ref).max())
    ok = out.shape == ref.shape and diff <= 1e-4
    print(json.dumps({"model": a.model, "size": size, "kernel": k, "batch": a.batch, "max_abs_diff": diff,
                      "output_range": [float(ref.min()), float(ref.max())], "ok": ok}))
    return 0 if ok else 1


# ---- data --------------------------------------------------------------------------------------
def prepare(vol, mean, std, rng=None):
    """log1p, per-channel normalisation and (with rng) per sample a random flip of each spatial axis
    and a random permutation of the three spatial axes. vol: int16 [B, 4, S, S, S] -> float32."""
    x = np.log1p(vol.astype(np.float32))
    x = (x - mean[None, :, None, None, None]) / std[None, :, None, None, None]
    if rng is not None:
        out = np.empty_like(x)
        for b in range(x.shape[0]):
            s = x[b]
            for ax in (1, 2, 3):
                if rng.random() < 0.5:
                    s = np.flip(s, ax)
            out[b] = np.transpose(s, (0, *(1 + rng.permutation(3))))
        x = out
    return np.ascontiguousarray(x, dtype=np.float32)


def lr_at(x, steps, epochs, peak, warmup, decay, final=0.0):
    """lib/train/schedule.h's formula (x = epoch + step / steps), plus the reference's step decay
    (x0.25 from epoch 32, x0.125 from epoch 64) as decay 'step'."""
    if x < warmup:
        return peak * min(1.0, (x + 1.0 / steps) / warmup)
    if decay == "step":
        return peak * (0.125 if x >= 64 else 0.25 if x >= 32 else 1.0)
    if decay == "constant":
        return peak
    t = min(1.0, max(0.0, (x - warmup) / max(1e-12, epochs - warmup)))
    return final + (peak - final) * (1 + math.cos(math.pi * t)) / 2


def evaluate(m, vol, tgt, mean, std, batch, fmt):
    m.eval()
    preds = []
    with torch.no_grad():
        for i in range(0, len(vol), batch):
            x = torch.from_numpy(prepare(np.asarray(vol[i:i + batch]), mean, std)).to(memory_format=fmt)
            preds.append(m(x).numpy())
    p = np.concatenate(preds)
    t = np.asarray(tgt)
    err = p - t
    return {"test_mse": float((err ** 2).mean()), "test_mae": float(np.abs(err).mean()),
            "test_mae_per_target": [float(v) for v in np.abs(err).mean(axis=0)]}


def cmd_train(a):
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    d = a.data
    trv = np.load(os.path.join(d, "train_volumes.npy"), mmap_mode="r")
    trt = np.load(os.path.join(d, "train_targets.npy"))
    tev = np.load(os.path.join(d, "test_volumes.npy"), mmap_mode="r")
    tet = np.load(os.path.join(d, "test_targets.npy"))
    size, k = trv.shape[-1], a.kernel
    if a.onnx:
        osize, k = model_shape(a.onnx)
        if osize != size:
            raise SystemExit(f"{a.onnx} is for {osize}^3 inputs, {d} holds {size}^3")
    m = CosmoFlow(size, k)
    if a.onnx:
        load_onnx(m, a.onnx)
    fmt = torch.channels_last_3d if a.channels_last else torch.contiguous_format
    m = m.to(memory_format=fmt)
    mean, std = np.asarray(a.mean, np.float32), np.asarray(a.std, np.float32)
    opt = torch.optim.SGD(m.parameters(), lr=0.0, momentum=0.9, weight_decay=a.weight_decay)
    peak = a.lr * a.batch_size / a.base_batch
    steps = len(trv) // a.batch_size
    if a.max_steps:
        steps = min(steps, a.max_steps)
    for epoch in range(a.epochs):
        rng = np.random.default_rng([a.seed, epoch])
        perm = rng.permutation(len(trv))
        m.train()
        t0, total = time.perf_counter(), 0.0
        for s in range(steps):
            idx = np.sort(perm[s * a.batch_size:(s + 1) * a.batch_size])
            x = torch.from_numpy(prepare(trv[idx], mean, std, rng)).to(memory_format=fmt)
            y = torch.from_numpy(trt[idx])
            lr = lr_at(epoch + s / steps, steps, a.epochs, peak, a.warmup_epochs, a.decay)
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            total += loss.item()
        secs = time.perf_counter() - t0
        rec = {"epoch": epoch + 1, "step": (epoch + 1) * steps, "lr": lr, "train_loss": total / steps,
               "samples_per_second": steps * a.batch_size / secs, "seconds": secs}
        tv, tt = (tev, tet) if not a.test_samples else (tev[:a.test_samples], tet[:a.test_samples])
        rec.update(evaluate(m, tv, tt, mean, std, a.eval_batch, fmt))
        rec["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(rec), flush=True)
    return 0


def cmd_throughput(a):
    rows = []
    for size in a.sizes:
        for threads in a.threads:
            torch.set_num_threads(threads)
            for batch in a.batches:
                torch.manual_seed(0)
                m = CosmoFlow(size, a.kernel).to(memory_format=torch.channels_last_3d)
                opt = torch.optim.SGD(m.parameters(), lr=1e-4, momentum=0.9)
                x = torch.randn(batch, 4, size, size, size).to(memory_format=torch.channels_last_3d)
                y = torch.rand(batch, 4) * 2 - 1

                def step():
                    opt.zero_grad(set_to_none=True)
                    F.mse_loss(m(x), y).backward()
                    opt.step()
                step()  # warm-up (oneDNN primitive creation)
                n, t0, c0 = 0, time.perf_counter(), time.process_time()
                while n < a.min_steps or time.perf_counter() - t0 < a.seconds:
                    step()
                    n += 1
                secs = time.perf_counter() - t0
                cpu = time.process_time() - c0
                r = {"size": size, "kernel": a.kernel, "threads": threads, "batch": batch, "steps": n,
                     "samples_per_second": round(n * batch / secs, 3),
                     "samples_per_cpu_s": round(n * batch / cpu, 3) if cpu > 0 else 0.0,
                     "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                     "memory_format": "channels_last_3d", "torch": torch.__version__}
                rows.append(r)
                print(json.dumps(r), flush=True)
    return 0


def cmd_step(a):
    """One case per process, for bench/bench_cosmoflow.sh's real-shape rows (128^3): step times in ms."""
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    fmt = torch.channels_last_3d
    m = CosmoFlow(a.size, a.kernel).to(memory_format=fmt)
    opt = torch.optim.SGD(m.parameters(), lr=1e-4, momentum=0.9)
    x = torch.randn(a.batch, 4, a.size, a.size, a.size).to(memory_format=fmt)
    y = torch.rand(a.batch, 4) * 2 - 1

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    for _ in range(a.warmup):
        step()
    ms = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        ms.append((time.perf_counter() - t0) * 1e3)
    ms_sorted = sorted(ms)
    print(json.dumps({"engine": "torch", "size": a.size, "kernel": a.kernel, "threads": torch.get_num_threads(),
                      "batch": a.batch, "warmup": a.warmup, "steps": a.steps, "step_ms": [round(v, 2) for v in ms],
                      "step_ms_median": round(ms_sorted[len(ms) // 2], 2),
                      "samples_per_second": round(a.batch * 1e3 / ms_sorted[len(ms) // 2], 4), "loss": loss,
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "memory_format": "channels_last_3d", "torch": torch.__version__}), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="module vs onnxruntime on one of our ONNX files")
    c.add_argument("model")
    c.add_argument("--batch", type=int, default=2)
    c.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train", help="train with the reference recipe; JSON lines per epoch")
    t.add_argument("--data", default="out/cosmo32", help="folder of cosmo_volumes.py's .npy files")
    t.add_argument("--onnx", default="", help="initial weights from this ONNX file (our make_models.py output)")
    t.add_argument("--kernel", type=int, default=3, help="conv kernel without --onnx (with it: the model's)")
    t.add_argument("--epochs", type=int, default=128)
    t.add_argument("--batch-size", type=int, default=4)
    t.add_argument("--eval-batch", type=int, default=32)
    t.add_argument("--lr", type=float, default=0.001, help="base learning rate at --base-batch")
    t.add_argument("--base-batch", type=int, default=64)
    t.add_argument("--warmup-epochs", type=float, default=4)
    t.add_argument("--decay", choices=["cosine", "step", "constant"], default="cosine",
                   help="cosine: as dist-train's configs; step: the reference's x0.25 at 32, x0.125 at 64")
    t.add_argument("--weight-decay", type=float, default=0.0)
    t.add_argument("--mean", type=float, nargs=4, default=MEAN)
    t.add_argument("--std", type=float, nargs=4, default=STD)
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    t.add_argument("--channels-last", action="store_true", help="channels_last_3d memory format")
    t.add_argument("--max-steps", type=int, default=0, help="cap on steps per epoch (0: all)")
    t.add_argument("--test-samples", type=int, default=0, help="evaluate on the first N test samples (0: all)")
    p = sub.add_parser("throughput", help="training samples/s and peak RSS")
    p.add_argument("--sizes", type=int, nargs="+", default=[32, 64])
    p.add_argument("--batches", type=int, nargs="+", default=[4, 16])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--kernel", type=int, default=3)
    p.add_argument("--seconds", type=float, default=3.0, help="time each case for at least this long")
    p.add_argument("--min-steps", type=int, default=2)
    s = sub.add_parser("step", help="time of one training step (median), one case; peak RSS")
    s.add_argument("--size", type=int, default=128)
    s.add_argument("--kernel", type=int, default=3)
    s.add_argument("--batch", type=int, default=1)
    s.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    s.add_argument("--warmup", type=int, default=1)
    s.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    return {"check": cmd_check, "train": cmd_train, "throughput": cmd_throughput, "step": cmd_step}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
