#!/usr/bin/python3
"""PyTorch side of bench/bench_fcl.sh: the dense first FC layer (Linear C*S*S -> O) and the
structured sparse one (Conv2d 1x1 C -> R, flatten, Linear R*S*S -> O) at the same shapes as
bench/fcl_bench, channels_last input, median milliseconds of forward and of backward (input and
weight gradients). Threads pinned as bench/bench_train_torch.py does.
usage: /usr/bin/python3 bench/bench_fcl_torch.py [--batch 64] [--channels 512] [--size 7]
           [--outputs 4096] [--rank 24] [--threads T] [--warmup 2] [--iterations 10]
Prints one JSON line per layer and pass, like fcl_bench."""
import argparse
import json
import os
import sys
import time

ap = argparse.ArgumentParser()
for k, v in (("batch", 64), ("channels", 512), ("size", 7), ("outputs", 4096), ("rank", 24), ("threads", 1),
             ("warmup", 2), ("iterations", 10)):
    ap.add_argument("--" + k, type=int, default=v)
a = ap.parse_args()
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    if os.environ.setdefault(var, str(a.threads)) != str(a.threads):
        sys.exit(f"bench_fcl_torch: {var}={os.environ[var]} differs from --threads {a.threads}")
import torch  # noqa: E402

torch.set_num_threads(a.threads)
torch.manual_seed(0)
B, C, S, O, R = a.batch, a.channels, a.size, a.outputs, a.rank
x = torch.randn(B, C, S, S).contiguous(memory_format=torch.channels_last).requires_grad_(True)
gy = torch.randn(B, O)
dense = torch.nn.Linear(C * S * S, O)
reduce = torch.nn.Conv2d(C, R, 1).to(memory_format=torch.channels_last)
sparse_fc = torch.nn.Linear(R * S * S, O)


def median_ms(fn):
    for _ in range(a.warmup):
        fn()
    t = []
    for _ in range(a.iterations):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e3)
    return sorted(t)[len(t) // 2]


def line(layer, p, ms, macs):
    print(json.dumps({"layer": layer, "pass": p, "threads": a.threads, "batch": B, "ms": round(ms, 3), "macs": macs}), flush=True)


def dense_fwd():
    return dense(torch.flatten(x, 1))


def sparse_fwd():
    return sparse_fc(torch.flatten(reduce(x), 1))


dense_macs, sparse_macs = B * O * C * S * S, B * S * S * R * C + B * O * R * S * S
with torch.no_grad():
    line("dense", "forward", median_ms(dense_fwd), dense_macs)
    line("sparse", "forward", median_ms(sparse_fwd), sparse_macs)
yd = dense_fwd()
line("dense", "backward", median_ms(lambda: torch.autograd.grad(yd, [x, dense.weight, dense.bias], gy, retain_graph=True)),
     2 * dense_macs)
ys = sparse_fwd()
line("sparse", "backward", median_ms(lambda: torch.autograd.grad(ys, [x, reduce.weight, reduce.bias, sparse_fc.weight,
                                                                     sparse_fc.bias], gy, retain_graph=True)),
     2 * sparse_macs)
