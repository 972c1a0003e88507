#!/usr/bin/env python3
"""Prepares (and with --submit, submits) a dist-train job for a cluster's job system.

  python3 scripts/cluster/launch.py --cluster configs/cluster/slurm-gpu.json \\
      --config configs/fashion_mnist_cnn.json [--job-dir DIR] [--bin build/tools] \\
      [--set KEY=VALUE ...] [--dry-run | --submit] [-f] [-- DIST-TRAIN FLAGS...]

Writes the job folder (jobdir.py): the scheduler's job script, the node scripts that stage the
huffgpu-compressed data and the binaries once per node and check each node's environment before
training, and the dist-train configuration rewritten to the staged paths. --dry-run prints the
job script, the launch lines, the staging plan and the checks, and writes nothing. --submit
submits the job script and prints the job id. stdout: one JSON object (job folder, job script,
submit command, staged bytes, job id); logs on stderr.

Exit status: 0 done; 1 usage (bad flags, no binaries); 2 bad input (cluster description,
dist-train configuration, data files); 3 I/O (writing the job folder, submitting).
Python 3 standard library only: login nodes rarely have more.
"""
import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import description  # noqa: E402
import jobdir  # noqa: E402
import mpi  # noqa: E402
import payload  # noqa: E402
import schedulers  # noqa: E402

# The source tree (scripts/cluster/launch.py), or the install prefix (share/hpcnn/cluster/launch.py,
# run through the bin/hpcnn-launch link): the default --bin is the build's tools/ or the prefix's bin/.
HERE = os.path.dirname(os.path.realpath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
INSTALLED_BIN = os.path.join(os.path.dirname(REPO), "bin")


def default_bin():
    if os.environ.get("HPCNN_BIN"):  # as scripts/tools.sh: a build's tools/ or an installed bin/
        return os.environ["HPCNN_BIN"]
    if os.path.isdir(os.path.join(REPO, "build", "tools")) or not os.path.isfile(os.path.join(INSTALLED_BIN, "dist-train")):
        return os.path.join(REPO, "build", "tools")
    return INSTALLED_BIN


def log(msg):
    print(f"launch: {msg}", file=sys.stderr)


def die(status, msg):
    print(f"launch: error: {msg}", file=sys.stderr)
    sys.exit(status)


class UsageParser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 1, as the tools' (argparse's default is 2)
        self.print_usage(sys.stderr)
        die(1, message)


def parse(argv):
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = UsageParser(prog="launch.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", required=True, help="cluster description (configs/cluster/README.md)")
    ap.add_argument("--config", required=True, help="dist-train configuration (configs/README.md)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="dist-train --set override (repeatable)")
    ap.add_argument("--job-dir", help="job folder to write (default: SHARED/NAME-YYYYmmdd-HHMMSS, SHARED the "
                                      "description's 'shared' or ./jobs); must be on the shared file system")
    ap.add_argument("--bin", default=default_bin(), help="the tools: a build's tools/ or an installed bin/ (default: $HPCNN_BIN, else "
                                                        "build/tools of this source tree, or the bin/ of the prefix it is installed in)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print everything, write and submit nothing")
    mode.add_argument("--submit", action="store_true", help="submit the job and print its id")
    ap.add_argument("-f", "--force", action="store_true", help="replace an existing job folder")
    a = ap.parse_args(argv)
    a.dist_train_args = extra
    return a


def main(argv):
    a = parse(argv)
    try:
        d = description.load(a.cluster)
    except description.DescriptionError as e:
        die(2, str(e))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    job_dir = os.path.abspath(a.job_dir or os.path.join(d["shared"] or "jobs", f"{d['name']}-{stamp}"))
    try:
        # Before anything else: a job folder the job system's directives cannot name fails here,
        # not at submission (exit 1 for --job-dir, 2 for the description's 'shared').
        schedulers.check_job_dir(d, job_dir)
    except schedulers.JobDirError as e:
        if a.job_dir:
            die(1, f"--job-dir: {e}; choose another folder")
        die(2, f"{a.cluster}: 'shared' ({d['shared'] or './jobs, the default'}): {e}; set 'shared' to another folder "
               "or give --job-dir")
    try:
        binaries = [payload.find_binary(a.bin, b) for b in payload.BINARIES]
        encoder = payload.find_binary(a.bin, "huffgpu-encode")
    except payload.PayloadError as e:
        die(1, str(e))
    try:
        cfg = payload.merged_config(binaries[0], a.config, a.set)
        payload.check_model(cfg)
        payload.check_data(cfg)
        for w in payload.check_parallel(d, cfg):
            log("warning: " + w)
        items = payload.plan(d, cfg, binaries)
    except payload.PayloadError as e:
        die(2, f"{a.config}: {e}")

    sources = f"{os.path.basename(a.cluster)} and {os.path.basename(a.config)}"
    staged = [rel for rel, _, _ in items]
    bin_dir = os.path.dirname(binaries[0]) if not d["stage"]["binaries"] else ""
    script = jobdir.job_sh(d, job_dir, staged, a.dist_train_args, sources)
    result = {"job_dir": job_dir, "job_script": os.path.join(job_dir, "job.sh"), "scheduler": d["scheduler"],
              "submit_command": schedulers.submit_command(d, os.path.join(job_dir, "job.sh")),
              "ranks": description.total_ranks(d), "threads_per_rank": d["threads_per_rank"],
              "staging_command": mpi.shell(mpi.per_node_command(d)), "train_command": mpi.shell(mpi.train_command(d))}

    if a.dry_run:
        print(f"# {result['job_script']} (not written)\n{script}", file=sys.stderr)
        print("# staged once per node to " + d["scratch"], file=sys.stderr)
        for rel, src, action in items:
            print(f"#   {rel:48s} <- {src} ({action}, {os.path.getsize(src)} bytes)", file=sys.stderr)
        print("# environment check on every node: ranks x threads <= cores online; binaries start and their libraries "
              "resolve; MPI launcher" + (f" version {d['mpi']['version']}" if d["mpi"]["version"] else "")
              + (f"; {d['gpus_per_node']} GPUs, CUDA {d['cuda_version'] or 'any'}, NCCL {d['nccl_version'] or 'any'}"
                 if d["gpus_per_node"] else "") + "; data files present, sized and decodable", file=sys.stderr)
        result["dry_run"] = True
        result["staged"] = [{"path": rel, "source": src, "action": action} for rel, src, action in items]
        print(json.dumps(result, indent=1))
        return 0

    if os.path.exists(job_dir):
        if not a.force:
            die(1, f"{job_dir} exists (use -f to replace it)")
        if not all(os.path.exists(os.path.join(job_dir, f)) for f in ("job.sh", "cluster.json", "payload")):
            die(1, f"{job_dir} is not a job folder made by launch.py: -f replaces job folders only")
    parent = os.path.dirname(job_dir)
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(job_dir)}.", dir=parent)
    except OSError as e:
        die(3, f"cannot create the job folder under {parent}: {e.strerror}")
    try:
        rows = payload.build(items, os.path.join(tmp, "payload"), encoder)
        total = sum(size for _, size, _ in rows)
        with open(os.path.join(tmp, "env.sh"), "w") as f:
            f.write(jobdir.env_sh(d, job_dir, total, bin_dir))
        with open(os.path.join(tmp, "job.sh"), "w") as f:
            f.write(script)
        for name in jobdir.NODE_SCRIPTS:
            with open(os.path.join(tmp, name), "w") as f:
                f.write(jobdir.node_script(name))
        for name in ("job.sh",) + jobdir.NODE_SCRIPTS[1:]:
            os.chmod(os.path.join(tmp, name), 0o755)
        with open(os.path.join(tmp, "train.json.in"), "w") as f:
            json.dump(payload.rewrite_config(cfg, items, job_dir, d), f, indent=1)
        with open(os.path.join(tmp, "cluster.json"), "w") as f:
            json.dump(d, f, indent=1)
        os.makedirs(os.path.join(tmp, "out"))
        if os.path.exists(job_dir):
            shutil.rmtree(job_dir)
        os.rename(tmp, job_dir)
    except payload.PayloadError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        die(2, str(e))
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        die(3, f"writing {job_dir}: {e}")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for rel, size, source_size in rows:
        if rel.startswith("data/"):
            log(f"staged data {rel}: {size} bytes (source {source_size} bytes)")
    log(f"wrote {job_dir}: {len(rows)} files to stage, {total} bytes per node")
    result["staged_bytes"] = total
    result["staged"] = [{"path": rel, "bytes": size, "source_bytes": src} for rel, size, src in rows]
    if a.submit:
        try:
            result["job_id"] = schedulers.submit(d, result["job_script"], f"local-{stamp}-{os.getpid()}",
                                                 os.path.join(job_dir, "out", "job.out"))
        except RuntimeError as e:
            die(3, f"submitting {result['job_script']}: {e}\n(the job folder is kept: submit it later from {job_dir} "
                   f"with `{' '.join(schedulers.submit_command(d, 'job.sh'))}`)")
        log(f"submitted job {result['job_id']}")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
