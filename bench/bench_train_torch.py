#!/usr/bin/python3
"""PyTorch side of the training-throughput benchmark (bench/bench_train.sh).

Trains a model of bench_models.py for W warm-up + S timed steps at batch B on one fixed random
batch of 1x28x28 images with random labels: forward, cross-entropy with label smoothing 0.1,
backward, SGD (momentum 0.9) update, gradients set to None each step. PyTorch at its best on
the CPU: channels_last memory format, and the thread count pinned three ways, because Debian's
build starts with 1 thread and its BLAS ignores torch's setting: torch.set_num_threads(T),
OMP_NUM_THREADS=T and OPENBLAS_NUM_THREADS=T (set here before torch is imported unless the
caller already set them; a different value is refused).

usage: /usr/bin/python3 bench/bench_train_torch.py MODEL [--threads T] [--batch 64]
           [--warmup W] [--steps S] [--lr 0.01] [--profile]
Prints one JSON line on stdout: images_per_s over the timed steps (and images_per_cpu_s, per
second of process CPU time: steadier on a shared machine), the BLAS library loaded, the loss,
resident memory after building the model and after the forward, backward and SGD phases of the
first step, and the peak RSS of the process (getrusage). --profile prints torch.autograd.profiler's per-operator table on stderr
for the timed steps instead (the throughput printed is then the profiled one).
"""
import argparse
import json
import os
import resource
import sys
import time


def blas_library():
    """The BLAS shared library this process loaded (Debian's torch links libblas.so.3)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "blas" in line.rsplit("/", 1)[-1]}
    except OSError:
        return "unknown"
    paths = sorted(os.path.realpath(p) for p in paths)
    return ", ".join(paths) or "none"


def rss_mib():
    """Current resident memory (VmRSS), MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="fmnist_cnn or resnet18 (bench_models.py)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    args = ap.parse_args()

    t = str(args.threads)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.setdefault(var, t) != t:
            sys.exit(f"bench_train_torch.py: error: {var}={os.environ[var]} but --threads {t}")

    import torch  # after the environment: libgomp and OpenBLAS read it when loaded
    import torch.nn as nn

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_models import INPUT_SHAPE, NUM_CLASSES, build_model

    torch.set_num_threads(args.threads)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = build_model(args.model, args.seed).to(memory_format=fmt).train()
    gen = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.batch, *INPUT_SHAPE, generator=gen).contiguous(memory_format=fmt)
    y = torch.randint(0, NUM_CLASSES, (args.batch,), generator=gen)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    rss = [rss_mib()]  # after building the model, then after each phase of the first step

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        if len(rss) == 1:
            rss.append(rss_mib())
        loss.backward()
        if len(rss) == 2:
            rss.append(rss_mib())
        opt.step()
        if len(rss) == 3:
            rss.append(rss_mib())
        return loss

    for _ in range(args.warmup):
        step()
    prof = torch.autograd.profiler.profile() if args.profile else None
    if prof:
        prof.__enter__()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    loss = float(loss)
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    if prof:
        prof.__exit__(None, None, None)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40), file=sys.stderr)
    print(json.dumps({
        "engine": "torch " + torch.__version__, "blas": blas_library(), "model": args.model, "threads": torch.get_num_threads(),
        "batch": args.batch, "warmup": args.warmup, "steps": args.steps, "seconds": round(seconds, 4),
        "cpu_seconds": round(cpu, 4), "images_per_s": round(args.steps * args.batch / seconds, 2),
        "images_per_cpu_s": round(args.steps * args.batch / cpu, 2), "loss": round(loss, 5),
        "rss_mib_load_fwd_bwd_sgd": rss,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


if __name__ == "__main__":
    main()
