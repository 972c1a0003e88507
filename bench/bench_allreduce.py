#!/usr/bin/env python3
"""Allreduce across hosts (issue 44, item 5): the time to sum the gradient buffer of ResNet-20
(Fashion-MNIST) and of CosmoFlow-32^3 over the ranks of 2 hosts of the test bed (scripts/testbed:
each host its own network namespace, TCP over a veth between hosts, shared memory inside one), by

  flat          MPI_Allreduce as Open MPI 4.1's coll/tuned chooses it (exchange.algorithm flat)
  hierarchical  ours (dist/hierarchical.h): reduce-scatter in the node, allreduce of one shard per
                node across nodes, allgather in the node (exchange.algorithm hierarchical)
  han           MPI_Allreduce by Open MPI's coll/han (--mca coll_han_priority 100; it has
                priority 0 in 4.1 and is never chosen unless raised)

and what `auto` picks (dist::choose_sum_algorithm_measured, run by the same program after the timed
rounds: on several nodes of several ranks it times both itself) against the faster of flat and hierarchical (the
two values of exchange.algorithm; HAN is the MPI's setting, mpi.allreduce of the cluster launcher),
per layout:

  1x2  one host, 2 ranks (shared memory only: the reference the link is compared with)
  2x1  2 hosts x 1 rank (one rank per core: timings are clean)
  2x2  2 hosts x 2 ranks (4 ranks on this 2-core machine: oversubscribed, stated in the table)
  2x2rr  the same placed round-robin (mpirun --map-by node: rank r on host r mod 2)
  3x2  3 hosts x 2 ranks (any HxR[rr] works: the test bed gets as many hosts as the largest layout)

and per link: unshaped (the veth: kernel TCP, several GB/s) and shaped with tbf to each --rates
value (this kernel has no netem, so no added delay). Each figure is the median over 21 calls of the
slowest rank's time after 3 warm-up calls (tests/dist/test_hierarchical_mpi.cpp --bench), the
smaller of ROUNDS alternating rounds (--rounds, default 3). Needs root (the test bed), a build (scripts/build.sh: the test
program and the models' sizes) and the .venv.

  sudo bench/bench_allreduce.py [--rates 10gbit 1gbit] [--layouts 1x2 2x1 2x2]

Prints a table (Markdown) and, per link and layout, whether auto's choice is within 5% of the
fastest (the issue's goal: auto never picks a loser) and the hierarchical/flat speed-up (goal:
>= 1.5x where the link is 10x slower than shared memory)."""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTBED = str(ROOT / "scripts" / "testbed" / "testbed")
PREFIX = f"tbar{os.getpid() % 10000}"


def build_dir():
    return Path(os.environ.get("BUILD_DIR", ROOT / "build"))


def parameter_counts():
    """{name: float parameters} of the two models, counted from their ONNX initializers."""
    import onnx
    from onnx import numpy_helper
    tmp = Path(tempfile.mkdtemp())
    py = str(ROOT / ".venv" / "bin" / "python")
    subprocess.run([py, str(ROOT / "scripts" / "make_train_models.py"), str(tmp)], check=True, capture_output=True)
    subprocess.run([py, str(ROOT / "configs" / "cosmoflow" / "make_models.py"), str(tmp), "--sizes", "32", "--kernels", "3"],
                   check=True, capture_output=True)
    out = {}
    for name, f in (("ResNet-20", "fashion_mnist_resnet.onnx"), ("CosmoFlow-32^3", "cosmoflow_32_k3.onnx")):
        m = onnx.load(str(tmp / f))
        out[name] = sum(numpy_helper.to_array(t).size for t in m.graph.initializer if t.data_type == onnx.TensorProto.FLOAT
                        and len(t.dims) >= 1)
    return out


def shape(layout):
    """'2x2' -> (2, 2, 'block'); '2x2rr' -> (2, 2, 'round-robin')."""
    m = re.fullmatch(r"(\d+)x(\d+)(rr)?", layout)
    if not m:
        raise SystemExit(f"bad layout {layout!r}: HOSTSxRANKS, with rr for round-robin placement (2x2rr)")
    return int(m.group(1)), int(m.group(2)), "round-robin" if m.group(3) else "block"


def mpirun(layout, extra):
    hosts, per, placement = shape(layout)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(hosts * per), "--bind-to", "none"]
    if hosts > 1:
        cmd += ["-host", ",".join(f"node{chr(97 + h)}:{per}" for h in range(hosts)), "--mca", "btl", "self,vader,tcp"]
        if placement == "round-robin":
            cmd += ["--map-by", "node"]  # rank r on host r mod N: consecutive ranks on different hosts
    return cmd + ["-x", "OMP_NUM_THREADS=1"] + extra


ROUNDS = 3


def timed(layout, count, han):
    """{'flat': ms, 'hierarchical': ms} (han: flat is MPI_Allreduce through coll/han)."""
    exe = str(build_dir() / "tests" / "test_hierarchical_mpi")
    extra = ["--mca", "coll_han_priority", "100"] if han else []
    cmd = mpirun(layout, extra) + [exe, "--bench", str(count), "--rounds", str(ROUNDS)]
    if not layout.startswith("1x"):
        cmd = [TESTBED, "--prefix", PREFIX, "exec", "head"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        if han:  # Open MPI 4.1.4's coll/han has crashed here (reported in the table, not fatal)
            sig = re.search(r"Signal: ([A-Za-z ]+) \((\d+)\)", p.stderr)
            return {"flat": f"crashed ({sig.group(1)})" if sig else f"failed (exit {p.returncode})"}, None
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr[-3000:]}")
    best = {}
    for m in re.finditer(r"^(flat|hierarchical): .* median ([0-9.]+) ms", p.stdout, re.M):
        best[m.group(1)] = min(best.get(m.group(1), float("inf")), float(m.group(2)))
    m = re.search(r"^auto: (flat|hierarchical)", p.stdout, re.M)
    return best, (m.group(1) if m else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", nargs="*", default=["10gbit", "1gbit"], help="tbf rates of the shaped links")
    ap.add_argument("--layouts", nargs="*", default=["1x2", "2x1", "2x2"])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    global ROUNDS
    ROUNDS = a.rounds
    counts = parameter_counts()
    print("| link | layout | buffer | flat ms | hierarchical ms | HAN ms | hier./flat speed-up | auto picks | fastest | auto ok |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for rate in ["unshaped"] + a.rates:
        multi = [lay for lay in a.layouts if not lay.startswith("1x")]
        if multi:
            subprocess.run([TESTBED, "--prefix", PREFIX, "down"], capture_output=True)
            hosts = max(shape(lay)[0] for lay in multi)
            up = [TESTBED, "--prefix", PREFIX, "--hosts", str(hosts)] + ([] if rate == "unshaped" else ["--rate", rate]) + ["up"]
            subprocess.run(up, check=True, capture_output=True)
        try:
            for layout in a.layouts:
                if layout.startswith("1x") and rate != "unshaped":
                    continue  # no link
                for name, count in counts.items():
                    t, pick = timed(layout, count, han=False)
                    han = timed(layout, count, han=True)[0]["flat"]
                    # auto chooses between the two exchange.algorithm values (HAN is an MPI setting)
                    fastest = min(t, key=t.get)
                    ok = t[pick] <= 1.05 * t[fastest]
                    verdicts.append(ok)
                    hosts, per, _ = shape(layout)
                    note = f" ({hosts * per} ranks on {os.cpu_count()} cores)" if hosts * per > (os.cpu_count() or 1) else ""
                    han_text = f"{han:.3f}" if isinstance(han, float) else han
                    print(f"| {rate if not layout.startswith('1x') else 'shared memory'} | {layout}{note} | {name} "
                          f"({count * 4 / 2**20:.2f} MiB) | {t['flat']:.3f} | {t['hierarchical']:.3f} | {han_text} | "
                          f"{t['flat'] / t['hierarchical']:.2f}x | {pick} | {fastest} | {'yes' if ok else 'NO'} |", flush=True)
        finally:
            if multi:
                subprocess.run([TESTBED, "--prefix", PREFIX, "down"], capture_output=True)
    print(f"\nauto within 5% of the fastest: {sum(verdicts)} of {len(verdicts)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
