#!/usr/bin/env python3
"""The node-local data cache (data.node_cache, lib/train/node_cache.h), measured: per node, the CPU
time its ranks spend opening the training data (reading and decoding the huffgpu shards, and with
the cache the copy into the node-shared window) and its ranks' resident memory, cached (`on`)
against per-rank decoding (`off`).

  bench/bench_node_cache.py [--hosts 2] [--ranks-per-host 2] [--steps 20] [--repeats 3]
                            [--images X.huf --labels Y.huf | --volumes DIR]

--hosts 2 runs on the two-host test bed (scripts/testbed; needs root); --hosts 1 runs mpirun on
this host. Default data: the 60 000 Fashion-MNIST training images and labels (Debian's
dataset-fashion-mnist), gunzipped and encoded with huffgpu-encode; --volumes DIR: DIR/train_volumes.npy
and DIR/train_targets.npy of scripts/data/cosmo_volumes.py, encoded the same way (with a
CosmoFlow model from configs/cosmoflow/make_models.py). Memory: every 50 ms, each rank's
/proc/PID/smaps_rollup; a node's figure is the largest over the run of the sum over its ranks at
one moment of Pss (proportional set size: a page shared by the node's k ranks counts 1/k for each,
so the shared window counts once per node) and, for comparison, of Rss (which counts it once per
rank). CPU: the summary's node_cache.train_open_cpu_ms_by_rank (CLOCK_PROCESS_CPUTIME_ID around
opening the data, all threads), summed per node. Prints one table row per mode and node, median of
the repeats."""
import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FM = "/usr/share/datasets/fashion-mnist"


def tool(name):
    b = os.environ.get("HPCNN_BIN", str(ROOT / "build" / "tools"))
    return str(Path(b) / name / name)


def rollup(pid):
    """{'Rss': bytes, 'Pss': bytes} of a process, or None when it is gone."""
    try:
        out = {}
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            k, _, v = line.partition(":")
            if k in ("Rss", "Pss"):
                out[k] = int(v.split()[0]) * 1024
        return out
    except OSError:
        return None


TAG = f"HPCNN_BENCH_TAG={os.getpid()}-{time.time_ns()}"  # this run's ranks (other jobs may run dist-train too)


def rank_of(pid):
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    if TAG.encode() not in env:
        return None
    for e in env:
        if e.startswith(b"OMPI_COMM_WORLD_RANK="):
            return int(e.split(b"=", 1)[1])
    return None


def dist_train_pids():
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().strip() == "dist-train":
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


def poll(stop, peaks, per_host):
    full = {}  # node -> its Pss sums at the samples where all of its ranks were alive
    """peaks[node] = {'Pss': max over time of the node's sum, 'Rss': ..., 'Pss_last': the median of the
    sums over the second half of the samples where all of the node's ranks were alive (training)}."""
    ranks = {}
    while not stop.is_set():
        now = {}
        for pid in dist_train_pids():
            if pid not in ranks:
                r = rank_of(pid)
                if r is None:
                    continue
                ranks[pid] = r
            m = rollup(pid)
            if m:
                now[pid] = m
        sums = {}
        for pid, m in now.items():
            node = ranks[pid] // per_host
            s = sums.setdefault(node, {"Pss": 0, "Rss": 0})
            s["Pss"] += m["Pss"]
            s["Rss"] += m["Rss"]
        counts = {}
        for pid in now:
            counts[ranks[pid] // per_host] = counts.get(ranks[pid] // per_host, 0) + 1
        for node, s in sums.items():
            p = peaks.setdefault(node, {"Pss": 0, "Rss": 0, "Pss_last": 0})
            p["Pss"] = max(p["Pss"], s["Pss"])
            p["Rss"] = max(p["Rss"], s["Rss"])
            if counts[node] == per_host:
                full.setdefault(node, []).append(s["Pss"])
        time.sleep(0.05)
    for node, v in full.items():  # the second half of the run: data loaded, training
        peaks[node]["Pss_last"] = statistics.median(v[len(v) // 2:])


def encode(src, out_dir):
    """src (gzipped or raw) -> out_dir/<name>.huf with huffgpu-encode; returns the .huf path."""
    name = Path(src).name.removesuffix(".gz")
    raw = Path(out_dir) / name
    if src.endswith(".gz"):
        with gzip.open(src) as f, open(raw, "wb") as o:
            shutil.copyfileobj(f, o)
    else:
        shutil.copy(src, raw)
    subprocess.run([tool("huffgpu-encode"), "-q", "-f", str(raw)], check=True)
    raw.unlink()
    return str(raw) + ".huf"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--ranks-per-host", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--images")
    ap.add_argument("--labels")
    ap.add_argument("--volumes", help="folder of cosmo_volumes.py output (train_volumes.npy, train_targets.npy)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="node-cache-bench-"))
    try:
        py = str(ROOT / ".venv" / "bin" / "python")
        if a.volumes:
            images = encode(str(Path(a.volumes) / "train_volumes.npy"), tmp)
            labels = encode(str(Path(a.volumes) / "train_targets.npy"), tmp)
            subprocess.run([py, str(ROOT / "configs" / "cosmoflow" / "make_models.py"), str(tmp)], check=True,
                           stdout=subprocess.DEVNULL)
            base = json.loads((ROOT / "configs" / "cosmoflow" / "cosmoflow_32.json").read_text())
            model = str(tmp / Path(base["model"]).name)
        else:
            images = a.images or encode(f"{FM}/train-images-idx3-ubyte.gz", tmp)
            labels = a.labels or encode(f"{FM}/train-labels-idx1-ubyte.gz", tmp)
            subprocess.run([py, str(ROOT / "scripts" / "make_train_models.py"), str(tmp)], check=True, stdout=subprocess.DEVNULL)
            base = json.loads((ROOT / "configs" / "fashion_mnist_cnn.json").read_text())
            model = str(tmp / "fashion_mnist_cnn.onnx")
        n = a.hosts * a.ranks_per_host
        rows = []
        for mode in ("off", "on"):
            results = []
            for rep in range(a.repeats):
                cfg = dict(base, model=model, output="", metrics="", epochs=1, final_polish_epochs=0,
                           max_steps_per_epoch=a.steps, threads=1, checkpoint={"path": ""})
                cfg["data"] = dict(cfg["data"], train_images=images, train_labels=labels, test_images="", test_labels="",
                                   node_cache=mode)
                (tmp / "cfg.json").write_text(json.dumps(cfg))
                mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), "-x", TAG]
                if a.hosts > 1:
                    hosts = ",".join(f"node{chr(ord('a') + i)}:{a.ranks_per_host}" for i in range(a.hosts))
                    cmd = [str(ROOT / "scripts" / "testbed" / "testbed"), "--hosts", str(a.hosts), "run", "--",
                           *mpirun, "-host", hosts, "--mca", "btl", "self,vader,tcp"]
                else:
                    cmd = mpirun
                cmd += [tool("dist-train"), "--config", str(tmp / "cfg.json"), "-q"]
                stop, peaks = threading.Event(), {}
                t = threading.Thread(target=poll, args=(stop, peaks, a.ranks_per_host))
                t.start()
                p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
                stop.set()
                t.join()
                if p.returncode != 0:
                    sys.exit(f"dist-train failed ({p.returncode}):\n{p.stderr}")
                s = json.loads(p.stdout.strip().splitlines()[-1])
                cpu = s["node_cache"]["train_open_cpu_ms_by_rank"]
                results.append({node: dict(cpu_ms=sum(cpu[node * a.ranks_per_host:(node + 1) * a.ranks_per_host]),
                                           decoded=sum(s["node_cache"]["files_decoded_by_rank"][
                                               node * a.ranks_per_host:(node + 1) * a.ranks_per_host]),
                                           **peaks.get(node, {"Pss": 0, "Rss": 0, "Pss_last": 0})) for node in range(a.hosts)})
            for node in range(a.hosts):
                med = {k: statistics.median(r[node][k] for r in results) for k in ("cpu_ms", "decoded", "Pss", "Rss", "Pss_last")}
                rows.append((mode, node, med))
        print(f"data: {images} ({os.path.getsize(images)} bytes), {labels}; {a.hosts} host(s) x {a.ranks_per_host} ranks, "
              f"{a.steps} steps, median of {a.repeats}")
        print("| node_cache | node | files decoded | open CPU s (node) | peak Pss MiB (node) | training Pss MiB (node) | peak Rss MiB (node) |")
        print("|---|---|---|---|---|---|---|")
        for mode, node, m in rows:
            print(f"| {mode} | {node} | {m['decoded']:.0f} | {m['cpu_ms'] / 1e3:.2f} | {m['Pss'] / 2**20:.1f} | "
                  f"{m['Pss_last'] / 2**20:.1f} | {m['Rss'] / 2**20:.1f} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
