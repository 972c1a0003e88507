"""What a job stages to every node, and the dist-train configuration that reads it there.

The payload folder (JOB/payload/, on the shared file system) holds what each node copies once
to its node-local scratch folder:
  bin/        dist-train and huffgpu-decode (the environment check verifies data with it)
  lib/        with stage.libraries: the shared-library closure of those binaries (ldd), minus
              the C library and the MPI stack, which must come from the node (MPI must match the
              launcher; glibc must match the kernel and the loader)
  data/KEY/   the dist-train data files (data.train_images, ...): compressed with huffgpu-encode
              (gzip files are gunzipped first), so the copy to every node moves compressed bytes
              and dist-train's loader decodes them as it reads them (lib/data/decompress.h)
  manifest.tsv  "size<TAB>relative path" per file: stage.sh checks every copy's size against it.

The dist-train configuration is merged by `dist-train --print-config` (so a bad key fails here,
on the login node, not in the queue), then its data paths point at @SCRATCH@/data/..., which
stage.sh replaces with each node's scratch folder; the model, the mask and the outputs (trained
model, metrics, checkpoint) stay on the shared file system, under JOB/out/ for the outputs.
"""
import gzip
import json
import os
import re
import shutil
import subprocess
import zlib

DATA_KEYS = ("train_images", "train_labels", "test_images", "test_labels")
SCRATCH = "@SCRATCH@"
BINARIES = ("dist-train", "huffgpu-decode")

# Never staged: the C library and loader (they must match the node's kernel and each other),
# the MPI stack (it must match the launcher and the interconnect), the GPU driver.
NOT_STAGED = re.compile(
    r"^(ld-linux.*|linux-vdso.*|lib(c|m|dl|rt|pthread|util|resolv|anl|nsl)\.so.*|libnss_.*"
    r"|libmpi.*|libopen-(pal|rte).*|libpmix.*|libpmi.*|libhwloc.*|libevent.*|libuc[pstm].*|libfabric.*"
    r"|libpsm.*|libibverbs.*|librdmacm.*|libmlx.*|libcuda\.so.*|libnvidia-.*|libudev.*)$")


class PayloadError(Exception):
    pass


def find_binary(bin_dir, name):
    """bin_dir/NAME/NAME (the build tree) or bin_dir/NAME (an installed bin/)."""
    for p in (os.path.join(bin_dir, name, name), os.path.join(bin_dir, name)):
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return os.path.abspath(p)
    raise PayloadError(f"no executable '{name}' in {bin_dir} (give --bin: the build's tools/ folder or an installed bin/)")


def merged_config(dist_train, config, sets):
    """dist-train's merged configuration (`--print-config`), with its errors as PayloadError."""
    cmd = [dist_train, "--config", config] + [a for s in sets for a in ("--set", s)] + ["--print-config"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise PayloadError(p.stderr.strip() or f"dist-train --print-config exited {p.returncode}")
    return json.loads(p.stdout)


def compression(path):
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head == b"HUFG":
        return "huffgpu"
    return "none"


def data_header(path):
    """The first bytes of a data file with its gzip layer undone (b"" when unreadable as gzip)."""
    with open(path, "rb") as f:
        head = f.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    try:
        with opener(path, "rb") as f:
            return f.read(16)
    except (OSError, EOFError, zlib.error):
        return b""


def check_data(cfg):
    """The data files name formats dist-train reads (IDX, NumPy .npy, CIFAR-10 .bin, huffgpu), and
    IDX images and labels agree on the sample count: a bad file fails here, not on the nodes."""
    counts = {}
    for key in DATA_KEYS:
        src = cfg["data"][key]
        if not src:
            continue
        try:
            head = data_header(src)
        except OSError as e:
            raise PayloadError(f"data.{key}: cannot read {src}: {e.strerror}") from None
        name = os.path.basename(src[:-3] if src.endswith(".gz") else src)
        if head[:4] == b"HUFG" or head[:6] == b"\x93NUMPY" or name.endswith(".bin"):
            continue
        if len(head) >= 8 and head[:2] == b"\x00\x00" and 0x08 <= head[2] <= 0x0E and 1 <= head[3] <= 4:
            counts[key] = int.from_bytes(head[4:8], "big")
            continue
        raise PayloadError(f"data.{key}: {src} is not an IDX, NumPy, CIFAR-10 or huffgpu file (gzipped or not)")
    for images, labels in (("train_images", "train_labels"), ("test_images", "test_labels")):
        if images in counts and labels in counts and counts[images] != counts[labels]:
            raise PayloadError(f"data.{images} holds {counts[images]} samples but data.{labels} {counts[labels]} labels")


def check_model(cfg):
    for key in ("model", "mask"):
        path = cfg.get(key)
        if path and not (os.path.isfile(path) and os.access(path, os.R_OK)):
            raise PayloadError(f"'{key}': {os.path.abspath(path)} is not a readable file "
                               "(relative paths are relative to the current folder)")


def check_parallel(d, cfg):
    """The rank grouping of dist-train's parallel section against the job's ranks: a spatial split
    of S (a group of S consecutive ranks shares each sample) or P pipeline stages must divide the
    ranks (dist-train would refuse at start, on the nodes); a spatial group that does not fit in one
    node works but sends its halo planes between nodes: a warning. Returns the warnings."""
    par = cfg.get("parallel", {})
    ranks, per_node = d["nodes"] * d["ranks_per_node"], d["ranks_per_node"]
    warnings = []
    for key, what in (("spatial", "a spatial split"), ("pipeline", "pipeline stages")):
        n = int(par.get(key, 1))
        if n > 1 and ranks % n:
            raise PayloadError(f"parallel.{key} {n} ({what}) does not divide the job's {ranks} ranks "
                               f"({d['nodes']} nodes x {per_node}): choose nodes and ranks_per_node to fit")
    s = int(par.get("spatial", 1))
    if s > 1 and per_node % s:
        warnings.append(f"parallel.spatial {s} does not divide ranks_per_node {per_node}: some spatial groups span two "
                        f"nodes and exchange their halo planes over the network (block placement keeps a group of "
                        f"consecutive ranks on one node when ranks_per_node is a multiple of {s})")
    return warnings


def plan(d, cfg, binaries):
    """The files to stage: (relative path in the payload, source path, action) with action one
    of copy, huffgpu (encode), gunzip+huffgpu."""
    items = []
    if d["stage"]["binaries"]:
        items += [(f"bin/{os.path.basename(b)}", b, "copy") for b in binaries]
    if d["stage"]["libraries"]:
        items += [(f"lib/{os.path.basename(lib)}", lib, "copy") for lib in library_closure(binaries)]
    if d["stage"]["data"]:
        for key in DATA_KEYS:
            src = cfg["data"][key]
            if not src:
                continue
            src = os.path.abspath(src)
            try:
                kind = compression(src)
            except OSError as e:
                raise PayloadError(f"data.{key}: cannot read {src}: {e.strerror}") from None
            name = os.path.basename(src)
            if any(ord(c) < 32 or ord(c) == 127 for c in name):
                # manifest.tsv holds one "size<TAB>path" line per file, read with `read` on the nodes.
                raise PayloadError(f"data.{key}: the file name {name!r} has a tab, newline or other control character: "
                                   "rename the file")
            action = "copy"
            if d["stage"]["compress"] == "huffgpu" and kind != "huffgpu":
                if kind == "gzip":
                    name, action = (name[:-3] if name.endswith(".gz") else name), "gunzip+huffgpu"
                else:
                    action = "huffgpu"
                name += ".huf"
            items.append((f"data/{key}/{name}", src, action))
    return items


def library_closure(binaries):
    """Shared libraries the binaries load (ldd), minus NOT_STAGED."""
    libs = {}
    for b in binaries:
        p = subprocess.run(["ldd", b], capture_output=True, text=True)
        if p.returncode != 0:
            raise PayloadError(f"ldd {b} failed: {p.stderr.strip()}")
        for line in p.stdout.splitlines():
            m = re.match(r"\s*(\S+)\s+=>\s+(\S+)", line)
            if not m:
                continue
            name, path = m.groups()
            if path == "not":
                raise PayloadError(f"{b}: shared library {name} not found on this machine (ldd)")
            if not NOT_STAGED.match(name):
                libs[name] = path
    return [libs[k] for k in sorted(libs)]


def build(items, payload_dir, huffgpu_encode):
    """Writes the payload folder and its manifest; returns [(relative path, size, source size)]."""
    os.makedirs(payload_dir, exist_ok=True)
    rows = []
    for rel, src, action in items:
        dst = os.path.join(payload_dir, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if action == "copy":
            shutil.copy2(src, dst)
        else:
            with open(dst, "wb") as out:
                opener = gzip.open if action == "gunzip+huffgpu" else open
                with opener(src, "rb") as f:
                    p = subprocess.Popen([huffgpu_encode, "-q", "-c", "-T", "0"], stdin=subprocess.PIPE, stdout=out,
                                         stderr=subprocess.PIPE)
                    try:
                        shutil.copyfileobj(f, p.stdin, 1 << 20)
                    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
                        p.kill()
                        p.wait()
                        raise PayloadError(f"{src}: cannot read: {e}") from None
                    p.stdin.close()
                    err = p.stderr.read().decode(errors="replace")
                    if p.wait() != 0:
                        raise PayloadError(f"huffgpu-encode of {src} failed: {err.strip()}")
        rows.append((rel, os.path.getsize(dst), os.path.getsize(src)))
    with open(os.path.join(payload_dir, "manifest.tsv"), "w") as f:
        for rel, size, _ in rows:
            f.write(f"{size}\t{rel}\n")
    return rows


def rewrite_config(cfg, items, job_dir, d):
    """The configuration each node runs: staged data paths, outputs under JOB/out/."""
    cfg = json.loads(json.dumps(cfg))
    staged = {rel.split("/")[1]: rel for rel, _, _ in items if rel.startswith("data/")}
    for key in DATA_KEYS:
        if key in staged:
            cfg["data"][key] = f"{SCRATCH}/{staged[key]}"
        elif cfg["data"][key]:
            cfg["data"][key] = os.path.abspath(cfg["data"][key])
    for key in ("model", "mask"):
        if cfg.get(key):
            cfg[key] = os.path.abspath(cfg[key])
    out = os.path.join(job_dir, "out")
    cfg["output"] = os.path.join(out, "trained.onnx")
    cfg["metrics"] = os.path.join(out, "metrics.jsonl")
    cfg["checkpoint"]["path"] = os.path.join(out, "checkpoint")
    cfg["threads"] = d["threads_per_rank"]
    return cfg
