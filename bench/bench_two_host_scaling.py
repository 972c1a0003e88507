#!/usr/bin/env python3
"""dist-train across two hosts against one (issue 44, item 5): training images/s of the Fashion-MNIST
CNN (configs/fashion_mnist_cnn.json) with one rank per core, one thread per rank, batch B per rank:

  1 host x 1 rank            the single-rank reference
  1 host x 2 ranks           shared memory
  2 hosts x 1 rank           the test bed (scripts/testbed), unshaped and shaped to each --rates value

Scaling efficiency = (images/s with 2 ranks) / (2 x images/s with 1 rank). Each run trains STEPS
steps of one epoch (the summary's train_images_per_second: the training steps only, the start and
the evaluation excluded); the best of --repeats runs. Needs root (the test bed), a build and the .venv.

  sudo .venv/bin/python bench/bench_two_host_scaling.py [--rates 1gbit] [--steps 200] [--batch 64] [--repeats 2]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTBED = str(ROOT / "scripts" / "testbed" / "testbed")
PREFIX = f"tbsc{os.getpid() % 10000}"


def tool(name):
    return str(Path(os.environ.get("HPCNN_BIN", ROOT / "build" / "tools")) / name / name)


def run(layout, args, steps, batch):
    hosts, per = layout
    cmd = ["mpirun", "--allow-run-as-root", "-np", str(hosts * per), "-x", "OMP_NUM_THREADS=1"]
    if hosts > 1:
        cmd += ["--bind-to", "none", "-host", ",".join(f"node{chr(97 + h)}:{per}" for h in range(hosts)),
                "--mca", "btl", "self,vader,tcp"]
    else:
        cmd += ["--bind-to", "core"]
    cmd += [tool("dist-train"), *args, "--batch-size", str(batch), "--epochs", "1", "--threads", "1",
            "--set", f"max_steps_per_epoch={steps}", "--set", 'data.test_images=""', "--set", 'checkpoint.path=""',
            "--set", 'metrics=""', "--set", 'output=""', "--set", "final_polish_epochs=0", "-q"]
    if hosts > 1:
        cmd = [TESTBED, "--prefix", PREFIX, "exec", "head"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", nargs="*", default=["1gbit"])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "scripts" / "make_train_models.py"), str(tmp)],
                   check=True, capture_output=True)
    args = ["--config", str(ROOT / "configs" / "fashion_mnist_cnn.json"), f"--model={tmp / 'fashion_mnist_cnn.onnx'}"]

    def best(layout):
        runs = [run(layout, args, a.steps, a.batch) for _ in range(a.repeats)]
        return max(r["train_images_per_second"] for r in runs), runs[0]["bytes_exchanged_per_step"]

    one, S = best((1, 1))
    rows = [("1 host x 1 rank", "-", one, None)]
    two, _ = best((1, 2))
    rows.append(("1 host x 2 ranks", "shared memory", two, two / (2 * one)))
    for rate in ["unshaped"] + a.rates:
        subprocess.run([TESTBED, "--prefix", PREFIX, "down"], capture_output=True)
        subprocess.run([TESTBED, "--prefix", PREFIX] + ([] if rate == "unshaped" else ["--rate", rate]) + ["up"],
                       check=True, capture_output=True)
        try:
            ips, _ = best((2, 1))
        finally:
            subprocess.run([TESTBED, "--prefix", PREFIX, "down"], capture_output=True)
        rows.append(("2 hosts x 1 rank", rate, ips, ips / (2 * one)))
    print(f"Fashion-MNIST CNN, batch {a.batch} per rank, {a.steps} steps, gradient buffer {S} bytes per step\n")
    print("| layout | link | images/s | scaling efficiency against 2 x 1 rank |")
    print("|---|---|---|---|")
    for name, link, ips, eff in rows:
        print(f"| {name} | {link} | {ips:.1f} | {'' if eff is None else f'{eff:.2f}'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
