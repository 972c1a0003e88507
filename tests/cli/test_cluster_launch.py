"""scripts/cluster/launch.py as a user runs it: job folders for every example cluster description
(golden job scripts, bash -n, shellcheck), bad descriptions and configurations (clear errors, no
job folder left), --dry-run, staging once per node (two node names mapped to two scratch
folders), the environment check's failures, cleanup, and a real run of the `none` scheduler
(mpirun, 2 ranks, in the background) that trains from the staged, huffgpu-compressed shards, and a
job killed in its second epoch that continues from its checkpoint when run again (`-- --resume auto`).
The real Slurm run is tests/cli/test_cluster_slurm.py."""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hpcnn_test as H
from test_dist_train import FM, fashion_mnist, small_idx, tiny_cnn  # noqa: F401 (the dataset check)

REPO = Path(__file__).resolve().parents[2]
LAUNCH = REPO / "scripts" / "cluster" / "launch.py"
GOLDEN = Path(__file__).resolve().parent / "golden_cluster"
EXAMPLES = ["slurm-gpu", "pbs", "fugaku", "abci", "local"]


def train_config(tmp, n=512, **over):
    """A small dist-train configuration: the first n Fashion-MNIST training images, the tiny CNN."""
    data = small_idx(tmp, n)
    data["test_images"], data["test_labels"] = data["train_images"], data["train_labels"]
    c = {"model": str(tiny_cnn(str(tmp / "tiny.onnx"))), "data": data, "epochs": 1, "batch_size": 32,
         "max_steps_per_epoch": 4, "eval_batch_size": 256, "seed": 5}
    c.update(over)
    p = tmp / "train.json"
    p.write_text(json.dumps(c))
    return p


def description(tmp, **over):
    d = {"name": "t", "scheduler": "none", "nodes": 1, "ranks_per_node": 2, "cores_per_node": 2, "threads_per_rank": 1,
         "scratch": str(tmp / "scratch" / "%n" / "%j"), "mpi": {"bind": "none"}}
    if os.geteuid() == 0:
        d["mpi"]["args"] = ["--allow-run-as-root", "--oversubscribe"]
    d.update(over)
    p = tmp / "cluster.json"
    p.write_text(json.dumps(d))
    return p


def launch(*args, env=None, check=True):
    e = dict(os.environ, **(env or {}))
    p = subprocess.run([sys.executable, str(LAUNCH), "--bin", H.BIN_DIR, *map(str, args)], capture_output=True,
                       text=True, env=e, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"launch.py {' '.join(map(str, args))} exited {p.returncode}:\n{p.stderr}")
    return p


def normalise(text, job_dir):
    text = text.replace(str(job_dir), "@JOB@")
    return re.sub(r"HPCNN_PAYLOAD_BYTES=\d+", "HPCNN_PAYLOAD_BYTES=@BYTES@", text)


def shellcheck(folder):
    files = ["job.sh", "env.sh", "common.sh", "stage.sh", "envcheck.sh", "rank.sh", "cleanup.sh"]
    p = subprocess.run(["shellcheck", "-x", *files], cwd=folder, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    for f in files:
        p = subprocess.run(["bash", "-n", f], cwd=folder, capture_output=True, text=True)
        assert p.returncode == 0, f"bash -n {f}: {p.stderr}"


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_job_scripts_match_golden_files(tmp_path, name):
    """The job script and settings generated for each example description, byte for byte (paths
    normalised); they pass bash -n and shellcheck. HPCNN_UPDATE_GOLDEN=1 rewrites the files."""
    job = tmp_path / "job"
    launch("--cluster", REPO / "configs" / "cluster" / f"{name}.json", "--config", train_config(tmp_path),
           "--job-dir", job)
    shellcheck(job)
    for kind in ("job.sh", "env.sh"):
        got = normalise((job / kind).read_text(), job)
        golden = GOLDEN / f"{name}.{kind}"
        if os.environ.get("HPCNN_UPDATE_GOLDEN") == "1":
            golden.write_text(got)
        assert got == golden.read_text(), f"{kind} for {name} differs from {golden}"


def test_directives_and_launch_lines_per_scheduler(tmp_path):
    """What each job system needs, checked independently of the golden files."""
    cfg = train_config(tmp_path)
    job = {}
    for name in EXAMPLES:
        out = launch("--cluster", REPO / "configs" / "cluster" / f"{name}.json", "--config", cfg, "--dry-run")
        job[name] = json.loads(out.stdout)
        job[name]["script"] = out.stderr
    s = job["slurm-gpu"]
    assert "#SBATCH --nodes=2" in s["script"] and "#SBATCH --ntasks-per-node=4" in s["script"]
    assert "#SBATCH --gpus-per-node=4" in s["script"] and "#SBATCH --cpus-per-task=8" in s["script"]
    assert s["staging_command"].startswith("srun --nodes=2 --ntasks=2 --ntasks-per-node=1")
    assert s["train_command"] == "mpirun -np 8 --map-by ppr:4:node:PE=8 --bind-to core"
    p = job["pbs"]
    assert "#PBS -l select=4:ncpus=36:mpiprocs=2:ompthreads=18" in p["script"]
    assert '--hostfile "$PBS_NODEFILE"' in p["train_command"] and p["submit_command"][0] == "qsub"
    f = job["fugaku"]
    assert '#PJM -L "node=16"' in f["script"] and '#PJM -L "rscgrp=small"' in f["script"]
    assert '#PJM --mpi "max-proc-per-node=4"' in f["script"] and "llio_transfer" in f["script"]
    assert f["train_command"] == "mpiexec -n 64" and f["submit_command"][0] == "pjsub"
    a = job["abci"]
    assert "#$ -l rt_F=2" in a["script"] and "#$ -l h_rt=01:00:00" in a["script"]
    assert a["submit_command"][:3] == ["qsub", "-g", "gaa00000"]
    assert "--hostfile \"$SGE_JOB_HOSTLIST\"" in a["train_command"]
    assert job["local"]["submit_command"][0] == "bash" and job["local"]["ranks"] == 2


@pytest.mark.parametrize("change,message", [
    ({"nodez": 1}, "unknown key 'nodez' (valid keys: name, scheduler"),
    ({"mpi": {"flavor": "openmpi"}}, "unknown key 'mpi.flavor' (valid keys: flavour"),
    ({"stage": {"data": 1}}, "'stage.data' must be a JSON bool"),
    ({"nodes": "2"}, "'nodes' must be an integer"),
    ({"nodes": True}, "'nodes' must be an integer"),
    ({"nodes": 0}, "'nodes' must be in [1, 1048576], not 0"),
    ({"cores_per_node": 10 ** 30, "threads_per_rank": 10 ** 20}, "'cores_per_node' must be in [1, 65536]"),
    ({"directives": ["#SBATCH --x\nrm -rf /tmp/x"]}, "'directives' entries are single lines"),
    ({"scratch": "/tmp/a\"b"}, "'scratch' must not contain quotes"),
    ({"scheduler": "lsf"}, "'scheduler' must be one of slurm, pbs, pjm, uge, none"),
    ({"threads_per_rank": 2}, "ranks_per_node x threads_per_rank = 2 x 2 = 4 exceeds cores_per_node = 2"),
    ({"gpus_per_node": 1}, "ranks_per_node = 2 exceeds gpus_per_node = 1"),
    ({"wall_time": "2h"}, "'wall_time' must be HH:MM:SS"),
    ({"scheduler": "pjm"}, "set mpi.flavour to 'fujitsu'"),
    ({"scheduler": "uge"}, "needs 'resource_type'"),
    ({"nodes": 2}, "needs 'hostfile'"),
    ({"scratch": "scratch"}, "'scratch' must be an absolute path"),
    ({"environment": {"NCCL_DEBUG": 1}}, "'environment.NCCL_DEBUG' must be a one-line string"),
])
def test_bad_descriptions_are_refused_naming_file_and_key(tmp_path, change, message):
    d = json.loads(description(tmp_path).read_text())
    d.update(change)
    (tmp_path / "bad.json").write_text(json.dumps(d))
    p = launch("--cluster", tmp_path / "bad.json", "--config", train_config(tmp_path), "--job-dir", tmp_path / "job",
               check=False)
    assert p.returncode == 2, p.stderr
    assert str(tmp_path / "bad.json") in p.stderr and message in p.stderr, p.stderr
    assert not (tmp_path / "job").exists()


def test_missing_required_key_and_unreadable_files(tmp_path):
    d = json.loads(description(tmp_path).read_text())
    del d["scratch"]
    (tmp_path / "bad.json").write_text(json.dumps(d))
    cfg = train_config(tmp_path)
    p = launch("--cluster", tmp_path / "bad.json", "--config", cfg, check=False)
    assert p.returncode == 2 and "key 'scratch' is required" in p.stderr
    (tmp_path / "trunc.json").write_text(description(tmp_path).read_text()[:40])
    p = launch("--cluster", tmp_path / "trunc.json", "--config", cfg, check=False)
    assert p.returncode == 2 and "trunc.json: not JSON" in p.stderr
    (tmp_path / "empty.json").write_text("")
    p = launch("--cluster", tmp_path / "empty.json", "--config", cfg, check=False)
    assert p.returncode == 2 and "empty.json: not JSON" in p.stderr
    p = launch("--cluster", tmp_path / "absent.json", "--config", cfg, check=False)
    assert p.returncode == 2 and "absent.json: cannot read" in p.stderr


def test_bad_training_configuration_or_data_leave_no_job_folder(tmp_path):
    desc = description(tmp_path)
    cfg = json.loads(train_config(tmp_path).read_text())
    cfg["optimiser"] = {}
    (tmp_path / "bad.json").write_text(json.dumps(cfg))
    p = launch("--cluster", desc, "--config", tmp_path / "bad.json", "--job-dir", tmp_path / "job", check=False)
    assert p.returncode == 2 and "optimiser" in p.stderr, p.stderr
    cfg = json.loads(train_config(tmp_path).read_text())
    cfg["data"]["train_images"] = str(tmp_path / "absent.idx")
    (tmp_path / "bad.json").write_text(json.dumps(cfg))
    p = launch("--cluster", desc, "--config", tmp_path / "bad.json", "--job-dir", tmp_path / "job", check=False)
    assert p.returncode == 2 and "absent.idx" in p.stderr, p.stderr
    # A corrupt gzip data file fails while the payload is made: no job folder, no temporary folder.
    (tmp_path / "bad.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"garbage")
    cfg["data"]["train_images"] = str(tmp_path / "bad.gz")
    (tmp_path / "bad.json").write_text(json.dumps(cfg))
    p = launch("--cluster", desc, "--config", tmp_path / "bad.json", "--job-dir", tmp_path / "job", check=False)
    assert p.returncode == 2 and "bad.gz" in p.stderr, p.stderr
    assert not [f for f in os.listdir(tmp_path) if f.startswith((".job", "job"))]


def test_bad_model_data_and_usage_fail_at_launch(tmp_path):
    """What would otherwise fail only on the nodes, after the queue: a missing model, a data file
    dist-train cannot read, images and labels of different counts; usage errors exit 1."""
    desc = description(tmp_path)
    p = launch("--cluster", desc, "--config", train_config(tmp_path, model=str(tmp_path / "absent.onnx")), check=False)
    assert p.returncode == 2 and "'model':" in p.stderr and "absent.onnx" in p.stderr, p.stderr
    (tmp_path / "noise.bin.gz").write_bytes(b"\x00" * 10)
    (tmp_path / "noise.idx").write_bytes(os.urandom(1000))
    cfg = json.loads(train_config(tmp_path).read_text())
    cfg["data"]["train_images"] = str(tmp_path / "noise.idx")
    (tmp_path / "bad.json").write_text(json.dumps(cfg))
    p = launch("--cluster", desc, "--config", tmp_path / "bad.json", check=False)
    assert p.returncode == 2 and "data.train_images" in p.stderr and "is not an IDX" in p.stderr, p.stderr
    cfg = json.loads(train_config(tmp_path).read_text())
    cfg["data"]["train_labels"] = f"{FM}/t10k-labels-idx1-ubyte.gz"
    (tmp_path / "bad.json").write_text(json.dumps(cfg))
    p = launch("--cluster", desc, "--config", tmp_path / "bad.json", check=False)
    assert p.returncode == 2 and "holds 512 samples but data.train_labels 10000 labels" in p.stderr, p.stderr
    p = launch("--cluster", desc, "--config", train_config(tmp_path), "--dry-run", "--submit", check=False)
    assert p.returncode == 1 and "not allowed with argument" in p.stderr
    (tmp_path / "latin1.json").write_bytes(b'{"name": "caf\xe9"}')
    p = launch("--cluster", tmp_path / "latin1.json", "--config", train_config(tmp_path), check=False)
    assert p.returncode == 2 and "not UTF-8" in p.stderr
    assert not [f for f in os.listdir(tmp_path) if f.startswith((".job", "jobs"))]


def test_force_replaces_job_folders_only(tmp_path):
    """-f never deletes a folder that launch.py did not make (e.g. the one holding the inputs)."""
    desc, cfg = description(tmp_path), train_config(tmp_path)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep")
    p = launch("--cluster", desc, "--config", cfg, "--job-dir", precious, "-f", check=False)
    assert p.returncode == 1 and "is not a job folder made by launch.py" in p.stderr
    assert (precious / "notes.txt").read_text() == "keep"
    p = launch("--cluster", desc, "--config", cfg, "--job-dir", tmp_path, "-f", check=False)
    assert p.returncode == 1 and desc.exists() and cfg.exists()


def test_nothing_staged_and_an_ampersand_in_the_scratch_path(tmp_path):
    job = tmp_path / "job"
    d = json.loads(description(tmp_path).read_text())
    d["stage"] = {"data": False, "binaries": False}
    (tmp_path / "c.json").write_text(json.dumps(d))
    launch("--cluster", tmp_path / "c.json", "--config", train_config(tmp_path), "--job-dir", job)
    assert (job / "payload" / "manifest.tsv").read_text() == ""
    d["stage"] = {}
    d["scratch"] = str(tmp_path / "a&b" / "%n")
    (tmp_path / "c.json").write_text(json.dumps(d))
    launch("--cluster", tmp_path / "c.json", "--config", train_config(tmp_path), "--job-dir", job, "-f")
    code, _, err = finish(node_script(job, "stage.sh", "n1"))
    assert code == 0, err
    staged = json.loads((tmp_path / "a&b" / "n1" / "train.json").read_text())
    assert staged["data"]["train_images"] == str(tmp_path / "a&b" / "n1" / "data/train_images/img.idx.huf")


def test_dry_run_writes_nothing_and_existing_folder_needs_force(tmp_path):
    desc, cfg, job = description(tmp_path), train_config(tmp_path), tmp_path / "job"
    p = launch("--cluster", desc, "--config", cfg, "--job-dir", job, "--dry-run")
    r = json.loads(p.stdout)
    assert r["dry_run"] and r["train_command"].startswith("mpirun -np 2 --map-by ppr:2:node --bind-to none")
    assert "#!/bin/bash" in p.stderr and "environment check on every node" in p.stderr
    assert [s["action"] for s in r["staged"] if s["path"].startswith("data/")] == ["huffgpu"] * 4
    assert not job.exists()
    launch("--cluster", desc, "--config", cfg, "--job-dir", job)
    p = launch("--cluster", desc, "--config", cfg, "--job-dir", job, check=False)
    assert p.returncode == 1 and "exists (use -f" in p.stderr
    launch("--cluster", desc, "--config", cfg, "--job-dir", job, "-f")



def test_parallel_grouping_checked_against_the_job(tmp_path):
    """parallel.spatial / parallel.pipeline that do not divide the job's ranks end with exit 2 before
    anything is made; a spatial group that straddles nodes is a warning (issue 43, item 6)."""
    cfg = train_config(tmp_path)
    for key, extra in (("spatial", []), ("pipeline", ["--set", "parallel.micro_batches=4"])):
        p = launch("--cluster", description(tmp_path, nodes=1, ranks_per_node=2), "--config", cfg,
                   "--set", f"parallel.{key}=4", *extra, "--job-dir", tmp_path / "j", "--dry-run", check=False)
        assert p.returncode == 2 and f"parallel.{key} 4" in p.stderr and "does not divide the job's 2 ranks" in p.stderr, p.stderr
        assert not (tmp_path / "j").exists()
    p = launch("--cluster", description(tmp_path, nodes=2, ranks_per_node=3, cores_per_node=3,
                                        hostfile=str(tmp_path / "hosts")),
               "--config", cfg, "--set", "parallel.spatial=2", "--job-dir", tmp_path / "j", "--dry-run")
    assert "warning: parallel.spatial 2 does not divide ranks_per_node 3" in p.stderr, p.stderr
    p = launch("--cluster", description(tmp_path, nodes=2, ranks_per_node=2, hostfile=str(tmp_path / "hosts")),
               "--config", cfg, "--set", "parallel.spatial=2", "--job-dir", tmp_path / "j", "--dry-run")
    assert "warning" not in p.stderr


def test_mpi_allreduce_choice_goes_into_the_environment(tmp_path):
    """mpi.allreduce: Open MPI's own allreduce (HAN, or a fixed coll/tuned algorithm) for every rank,
    exported in env.sh; a value or flavour it cannot serve is refused with exit 2 (issue 44, item 2)."""
    cfg = train_config(tmp_path)
    for choice, want in (("han", ["export OMPI_MCA_coll_han_priority=100"]),
                         ("tuned:ring", ["export OMPI_MCA_coll_tuned_use_dynamic_rules=1",
                                         "export OMPI_MCA_coll_tuned_allreduce_algorithm=4"]),
                         ("tuned:rabenseifner", ["export OMPI_MCA_coll_tuned_allreduce_algorithm=6"])):
        job = tmp_path / f"job-{choice.replace(':', '-')}"
        launch("--cluster", description(tmp_path, mpi={"bind": "none", "allreduce": choice,
                                                       "args": ["--allow-run-as-root", "--oversubscribe"]}),
               "--config", cfg, "--job-dir", job)
        env = (job / "env.sh").read_text().splitlines()
        for line in want:
            assert line in env, (choice, env)
    for bad, says in (({"allreduce": "tuned:fastest"}, "'mpi.allreduce' must be"),
                      ({"allreduce": "han", "flavour": "mpich"}, "sets Open MPI's collective components")):
        p = launch("--cluster", description(tmp_path, mpi=bad), "--config", cfg, "--job-dir", tmp_path / "bad",
                   check=False)
        assert p.returncode == 2 and says in p.stderr, p.stderr
        assert not (tmp_path / "bad").exists()

# ---- job folders with spaces and other characters (issue 40, item 5) ----------------------------
# Each job system reads its directive lines with its own parser; these models follow the functions
# that scripts/cluster/schedulers.py cites, and read the output path back from the generated line.
def slurm_words(line):
    """sbatch's get_argument() (src/sbatch/opt.c): '...' and "..." group, a backslash takes the next
    character (inside quotes too), an unquoted '#' ends the line."""
    words, word, quote, i, started = [], "", None, 0, False
    while i < len(line):
        c = line[i]
        if c == "\\" and i + 1 < len(line):
            word, started, i = word + line[i + 1], True, i + 2
            continue
        if quote:
            if c == quote:
                quote = None
            else:
                word += c
        elif c in "'\"":
            quote, started = c, True
        elif c == "#":
            break
        elif c.isspace():
            if started:
                words.append(word)
            word, started = "", False
        else:
            word, started = word + c, True
        i += 1
    assert quote is None, f"unmatched quote in {line!r}"
    return words + ([word] if started else [])


def pbs_words(line):
    """qsub's make_argv() (OpenPBS src/cmds/qsub.c): '...' and "..." group with nothing escaped
    inside, a backslash outside quotes takes the next character; adjacent pieces make one word."""
    words, word, i, started = [], "", 0, False
    while i < len(line):
        c = line[i]
        if c in "'\"":
            j = line.index(c, i + 1)  # ValueError: unmatched quote
            word, started, i = word + line[i + 1:j], True, j + 1
            continue
        if c == "\\":
            word, started, i = word + line[i + 1], True, i + 2
            continue
        if c.isspace():
            if started:
                words.append(word)
            word, started = "", False
        else:
            word, started = word + c, True
        i += 1
    return words + ([word] if started else [])


def sge_words(line):
    """Grid Engine's parse_script_file() (source/common/parse_job_cull.c): the line ends at its first
    '#', words split at whitespace outside quotes (string_list()), then every quote goes."""
    line = line.split("#", 1)[0]
    words, word, quote = [], "", None
    for c in line:
        if quote is None and c.isspace():
            if word:
                words.append(word)
            word = ""
            continue
        if quote is None and c in "'\"":
            quote = c
        elif c == quote:
            quote = None
        word += c
    words += [word] if word else []
    return [w.replace('"', "").replace("'", "") for w in words]


def slurm_pattern(path, job_id="77"):
    """sbatch(1) FILENAME PATTERN as slurmd expands it (expand_stdio_fields()): %% and %j; with a
    backslash anywhere, nothing is expanded and the backslashes go."""
    if "\\" in path:
        return path.replace("\\", "")
    return re.sub(r"%(.)", lambda m: {"%": "%", "j": job_id}[m.group(1)], path)


# example: (the directive's prefix, its words after the prefix -> the output path it names)
OUTPUT = {
    "slurm-gpu": ("#SBATCH", lambda rest: slurm_pattern(slurm_words(rest)[0].removeprefix("--output="))),
    "pbs": ("#PBS", lambda rest: pbs_words(rest)[1]),
    "fugaku": ("#PJM", lambda rest: rest.split()[1].replace("%j", "77")),
    "abci": ("#$", lambda rest: re.sub(r"^:(?=/)", "", sge_words(rest)[1])),  # ":/path": a path with ':' and no host
}
OUT_FILE = {"slurm-gpu": "out/job.77.out", "pbs": "out/job.out", "fugaku": "out/job.77.out", "abci": "out/job.out"}
ODD_FOLDERS = {"space": "my runs/r 1", "quotes": "it's \"q\"", "percent": "100%", "hash": "run #2", "colon": "a:b",
               "dollar": "$HOME x", "comma": "a,b", "non-ascii": "ünïcode", "backslash": "back\\slash", "tab": "a\tb"}
# What each job system cannot name in its output directive: refused (exit 1, no folder).
REFUSED = {
    "slurm-gpu": {"backslash", "tab"},
    "pbs": {"non-ascii", "backslash", "tab"},
    "fugaku": set(ODD_FOLDERS),
    "abci": {"quotes", "hash", "dollar", "comma", "backslash", "tab"},
    "local": {"tab"},
}


@pytest.mark.parametrize("name", EXAMPLES)
def test_job_dirs_with_spaces_are_quoted_or_refused(tmp_path, name):
    """A job folder with spaces (issue 40: `--job-dir "jobs/my runs/r 1"`): Slurm, PBS and Grid
    Engine get the output directive quoted as their directive parsers read it; the whole job script
    and env.sh are the golden ones with the folder quoted where it appears, and pass bash -n and
    shellcheck. PJM documents no quoting in directives: a clear refusal (exit 1) and no folder."""
    jobs = tmp_path / "jobs"
    job = jobs / "my runs" / "r 1"
    cluster = REPO / "configs" / "cluster" / f"{name}.json"
    p = launch("--cluster", cluster, "--config", train_config(tmp_path), "--job-dir", job, check=False)
    if name == "fugaku":
        assert p.returncode == 1, p.stderr
        assert f"--job-dir: Fujitsu PJM (scheduler 'pjm') cannot take the job folder '{job}' in '#PJM -o'" in p.stderr
        assert "letters, digits and '._-/' only (it has ' ')" in p.stderr, p.stderr
        assert not jobs.exists() and p.stdout == ""
        return
    assert p.returncode == 0, p.stderr
    shellcheck(job)
    quoted = {"slurm-gpu": f'#SBATCH --output="{job}/out/job.%j.out"', "pbs": f'#PBS -o "{job}/out/job.out"',
              "abci": f'#$ -o "{job}/out/job.out"'}
    for kind in ("job.sh", "env.sh"):
        want = (GOLDEN / f"{name}.{kind}").read_text()
        if name in quoted:
            plain = {"slurm-gpu": "#SBATCH --output=@JOB@/out/job.%j.out", "pbs": "#PBS -o @JOB@/out/job.out",
                     "abci": "#$ -o @JOB@/out/job.out"}[name]
            want = want.replace(plain, quoted[name])
        want = want.replace("job_dir=@JOB@", f"job_dir='{job}'").replace("HPCNN_JOB_DIR=@JOB@", f"HPCNN_JOB_DIR='{job}'")
        got = re.sub(r"HPCNN_PAYLOAD_BYTES=\d+", "HPCNN_PAYLOAD_BYTES=@BYTES@", (job / kind).read_text())
        assert got == want.replace("@JOB@", str(job)), f"{kind} for {name}:\n{got}"
    # The shell reads the folder back whole, and the job's settings name it.
    env_sh = shlex.quote(str(job / "env.sh"))
    got = subprocess.run(["bash", "-c", f'source {env_sh}; printf %s "$HPCNN_JOB_DIR"'], capture_output=True, text=True,
                         check=True).stdout
    assert got == str(job)


@pytest.mark.parametrize("name", EXAMPLES)
def test_odd_job_dirs_read_back_through_each_directive_parser(tmp_path, name):
    """Quotes, '%', '#', ':', '$', ',', non-ASCII, backslashes and tabs in the job folder: either the
    output directive, read by a model of the job system's own parser, names <job>/out/..., and the
    job script's job_dir line gives the folder back in bash; or a refusal (exit 1) that names the
    scheduler, the directive and the folder, and nothing is written."""
    cluster = REPO / "configs" / "cluster" / f"{name}.json"
    cfg = train_config(tmp_path)
    for case, folder in ODD_FOLDERS.items():
        job = tmp_path / "jobs" / folder
        p = launch("--cluster", cluster, "--config", cfg, "--job-dir", job, "--dry-run", check=False)
        if case in REFUSED[name]:
            assert p.returncode == 1, f"{name} {case}: {p.stderr}"
            assert "launch: error: --job-dir: " in p.stderr and repr(str(job)) in p.stderr, p.stderr
            if case != "tab":
                label = {"slurm-gpu": "Slurm (scheduler 'slurm')", "pbs": "PBS Pro (scheduler 'pbs')",
                         "fugaku": "Fujitsu PJM (scheduler 'pjm')", "abci": "Grid Engine (scheduler 'uge')"}[name]
                assert label in p.stderr, p.stderr
            continue
        assert p.returncode == 0, f"{name} {case}: {p.stderr}"
        script = p.stderr.split(" (not written)\n", 1)[1]
        line = next(x for x in script.splitlines() if x.startswith("job_dir="))
        back = subprocess.run(["bash", "-c", f'{line}; printf %s "$job_dir"'], capture_output=True, text=True, check=True)
        assert back.stdout == str(job), f"{name} {case}: {line}"
        if name in OUTPUT:
            prefix, read = OUTPUT[name]
            line = next(x for x in script.splitlines() if x.startswith(prefix + " -o ") or x.startswith(prefix + " --output"))
            assert read(line[len(prefix):]) == f"{job}/{OUT_FILE[name]}", f"{name} {case}: {line}"
    assert not (tmp_path / "jobs").exists()


def test_sbatch_parses_the_quoted_output_path(tmp_path):
    """Debian's sbatch itself (no controller needed: it reads the script before it connects): the
    unquoted directive of issue 40 is the error users saw; the launcher's quoted one gives the
    folder back whole, '%' as '%%' in the pattern."""
    assert shutil.which("sbatch"), "sbatch is missing: scripts/setup.sh installs slurm-client"
    job = tmp_path / "jobs" / "my runs" / "r 1 (100%)"
    launch("--cluster", REPO / "configs" / "cluster" / "slurm-gpu.json", "--config", train_config(tmp_path),
           "--job-dir", job)
    # A controller that is not there: sbatch parses the script, then fails to connect.
    (tmp_path / "slurm.conf").write_text("ClusterName=t\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\n"
                                         "AuthType=auth/none\nNodeName=n1 CPUs=1 State=UNKNOWN\n"
                                         "PartitionName=p Nodes=ALL Default=YES\n")
    env = dict(os.environ, SLURM_CONF=str(tmp_path / "slurm.conf"))

    def sbatch(script):
        return subprocess.run(["sbatch", "-v", str(script)], capture_output=True, text=True, env=env, timeout=60).stderr

    err = sbatch(job / "job.sh")
    assert "Invalid directive" not in err, err
    out = re.search(r"sbatch: output +: (.*)", err)
    assert out and out.group(1) == str(job).replace("%", "%%") + "/out/job.%j.out", err
    unquoted = re.sub(r'--output="(.*)"', r"--output=\1", (job / "job.sh").read_text())
    (tmp_path / "unquoted.sh").write_text(unquoted)
    assert "Invalid directive found in batch script: runs/r" in sbatch(tmp_path / "unquoted.sh")


def test_data_file_names_are_quoted_in_llio_transfer_and_manifest(tmp_path):
    """Fugaku's llio_transfer lines name the staged data files, which are named after the user's:
    spaces, '$', '"' and '`' stay inside the double-quoted words; a newline in a data file name is
    refused (manifest.tsv is one line per file) and no job folder is left."""
    cfg = json.loads(train_config(tmp_path).read_text())
    odd = tmp_path / 'my "img" $1 `x`.idx'
    shutil.copy(cfg["data"]["train_images"], odd)
    cfg["data"]["train_images"] = str(odd)
    (tmp_path / "odd.json").write_text(json.dumps(cfg))
    job = tmp_path / "job"
    launch("--cluster", REPO / "configs" / "cluster" / "fugaku.json", "--config", tmp_path / "odd.json", "--job-dir", job)
    shellcheck(job)
    line = next(x for x in (job / "job.sh").read_text().splitlines() if x.startswith("llio_transfer "))
    words = subprocess.run(["bash", "-c", f"job_dir=/J; printf '%s\\n' {line.removeprefix('llio_transfer ')}"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert words[2] == '/J/payload/data/train_images/my "img" $1 `x`.idx.huf', words
    (tmp_path / "nl\nimg.idx").write_bytes(odd.read_bytes())
    cfg["data"]["train_images"] = str(tmp_path / "nl\nimg.idx")
    (tmp_path / "nl.json").write_text(json.dumps(cfg))
    p = launch("--cluster", description(tmp_path), "--config", tmp_path / "nl.json", "--job-dir", tmp_path / "job2",
               check=False)
    assert p.returncode == 2 and "data.train_images: the file name 'nl\\nimg.idx' has a tab, newline" in p.stderr, p.stderr
    assert not (tmp_path / "job2").exists() and not [f for f in os.listdir(tmp_path) if f.startswith(".job2")]


def test_default_job_folder_under_an_unsuitable_shared_folder_names_the_key(tmp_path):
    """Without --job-dir the folder comes from the description's 'shared': a refusal there is a bad
    description (exit 2) and says which key to change."""
    d = json.loads((REPO / "configs" / "cluster" / "fugaku.json").read_text())
    d["shared"] = str(tmp_path / "shared space")
    (tmp_path / "f.json").write_text(json.dumps(d))
    p = launch("--cluster", tmp_path / "f.json", "--config", train_config(tmp_path), check=False)
    assert p.returncode == 2, p.stderr
    assert f"f.json: 'shared' ({tmp_path / 'shared space'}): Fujitsu PJM (scheduler 'pjm')" in p.stderr, p.stderr
    assert not (tmp_path / "shared space").exists()


# ---- what each job system accepts in the fields written into its directives (issue 40, item 6) ---
@pytest.mark.parametrize("example,change,message", [
    # Grid Engine: no digit first (qmaster: "cannot start with a digit"), no keywords, object names.
    ("abci", {"name": "1run"}, "Grid Engine (scheduler 'uge') does not accept 'name' \"1run\": a Grid Engine job name "
                               "(qsub -N) must not start with a digit"),
    ("abci", {"name": "2025-sweep"}, "does not accept 'name' \"2025-sweep\": a Grid Engine job name (qsub -N) must not"),
    ("abci", {"name": "All"}, "does not accept 'name' \"All\": NONE, ALL and TEMPLATE are Grid Engine keywords"),
    ("abci", {"name": "r" * 513}, "a Grid Engine job name has at most 512 characters"),
    ("abci", {"resource_type": "rt_F(1)"}, "does not accept 'resource_type' \"rt_F(1)\": a Grid Engine object name"),
    ("abci", {"resource_type": "", "parallel_environment": "mpi@x"}, "'parallel_environment' \"mpi@x\": a Grid Engine "
                                                                     "object name (sge_types(5))"),
    ("abci", {"name": "run1"}, None),
    ("abci", {"name": "sweep-2025.a_b"}, None),
    # PBS Pro: a digit first is fine for qsub; 230 characters; queue names of at most 15.
    ("pbs", {"name": "2025-sweep"}, None),
    ("pbs", {"name": "r" * 231}, "PBS Pro (scheduler 'pbs') does not accept 'name' \"rrrr"),
    ("pbs", {"queue": "a-very-long-queue"}, "'queue' \"a-very-long-queue\": a PBS queue name has at most 15 characters"),
    ("pbs", {"queue": "workq@pbs-server"}, None),
    # PJM: job names of at most 63 bytes; the resource group goes into a comma-separated -L list.
    ("fugaku", {"name": "1run"}, None),
    ("fugaku", {"name": "r" * 63}, None),
    ("fugaku", {"name": "r" * 64}, "Fujitsu PJM (scheduler 'pjm') does not accept 'name'"),
    ("fugaku", {"queue": "small,node=2"}, "'queue' \"small,node=2\": the resource group goes into #PJM -L"),
    # Slurm: no rule on the first character; an unquoted '#' would end the #SBATCH line.
    ("slurm-gpu", {"name": "1run"}, None),
    ("slurm-gpu", {"queue": "gpu#1"}, "Slurm (scheduler 'slurm') does not accept 'queue' \"gpu#1\": a '#' starts a comment"),
    ("slurm-gpu", {"account": "a" * 1025}, "does not accept 'account'"),
    ("slurm-gpu", {"wall_time": "00:00:00"}, "does not accept 'wall_time' \"00:00:00\": zero is no time limit"),
    ("local", {"name": "1run"}, None),
])
def test_scheduler_naming_rules(tmp_path, example, change, message):
    """Each job system's rules for the job name, queue, account, resource strings and time limit,
    checked with the description (exit 2, the scheduler, key, value and rule named, no job folder);
    legal values still make a job."""
    d = json.loads((REPO / "configs" / "cluster" / f"{example}.json").read_text())
    d.update(change)
    (tmp_path / "c.json").write_text(json.dumps(d))
    p = launch("--cluster", tmp_path / "c.json", "--config", train_config(tmp_path), "--job-dir", tmp_path / "job",
               "--dry-run" if message is None else "-f", check=False)
    if message is None:
        assert p.returncode == 0, p.stderr
        if "name" in change and example != "local":
            assert f" {change['name']}\n" in p.stderr or f"={change['name']}\n" in p.stderr, p.stderr
        return
    assert p.returncode == 2, p.stderr
    assert str(tmp_path / "c.json") in p.stderr and message in p.stderr, p.stderr
    assert not (tmp_path / "job").exists()


def test_launcher_needs_only_the_standard_library(tmp_path):
    """Login nodes have no venv: the launcher runs under `python3 -I -S` (no site-packages)."""
    p = subprocess.run(["/usr/bin/python3", "-I", "-S", str(LAUNCH), "--bin", H.BIN_DIR, "--cluster",
                        description(tmp_path), "--config", train_config(tmp_path), "--dry-run"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["ranks"] == 2


def node_script(job, script, node, job_id="J1", env=None, **kw):
    e = dict(os.environ, HPCNN_NODE=node, **(env or {}))
    return subprocess.Popen(["bash", str(job / script), job_id], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def finish(p):
    out, err = p.communicate(timeout=120)
    return p.returncode, out, err


def test_staging_happens_once_per_node(tmp_path):
    """Two node names mapped to two scratch folders (scratch = .../%n/%j): three processes on
    node a and one on node b stage concurrently; each node copies once, and its dist-train
    configuration points at its own folder."""
    job = tmp_path / "job"
    r = json.loads(launch("--cluster", description(tmp_path), "--config", train_config(tmp_path), "--job-dir", job).stdout)
    procs = [node_script(job, "stage.sh", n) for n in ("a", "a", "b", "a")]
    for p in procs:
        code, out, err = finish(p)
        assert code == 0, err
    log = (job / "out" / "stage.log").read_text().splitlines()
    assert sorted(line.split()[0] for line in log) == ["a", "b"], log
    assert (job / "out" / "envcheck.log").read_text().split() == ["a", "ok", "b", "ok"] or \
        sorted((job / "out" / "envcheck.log").read_text().splitlines()) == ["a ok", "b ok"]
    for n in ("a", "b"):
        scratch = tmp_path / "scratch" / n / "J1"
        for s in r["staged"]:
            assert (scratch / s["path"]).stat().st_size == s["bytes"]
        cfg = json.loads((scratch / "train.json").read_text())
        assert cfg["data"]["train_images"] == str(scratch / "data/train_images/img.idx.huf")
        assert cfg["output"] == str(job / "out" / "trained.onnx")
    # The staged shard decodes to the original bytes (huffgpu on the wire, the data unchanged).
    d = subprocess.run([H.tool("huffgpu-decode"), "-c", tmp_path / "scratch/b/J1/data/train_images/img.idx.huf"],
                       capture_output=True, check=True)
    assert d.stdout == (tmp_path / "img.idx").read_bytes()
    # A rank on a node that was not staged stops with the reason.
    code, _, err = finish(node_script(job, "rank.sh", "c"))
    assert code == 1 and "node c: error: this node was not staged" in err
    # Cleanup removes what staging wrote, and nothing else.
    (tmp_path / "scratch/a/J1/mine.txt").write_text("user file")
    for n in ("a", "b"):
        code, _, err = finish(node_script(job, "cleanup.sh", n))
        assert code == 0, err
    assert os.listdir(tmp_path / "scratch/a/J1") == ["mine.txt"]
    assert not (tmp_path / "scratch/b/J1").exists()


def test_environment_check_failures_name_the_node_and_reason(tmp_path):
    job = tmp_path / "job"
    launch("--cluster", description(tmp_path), "--config", train_config(tmp_path), "--job-dir", job)
    code, _, err = finish(node_script(job, "stage.sh", "a"))
    assert code == 0, err
    # A staged shard corrupted on the node: the check decodes it and fails.
    shard = tmp_path / "scratch/a/J1/data/train_images/img.idx.huf"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x5A
    shard.write_bytes(bytes(data))
    code, _, err = finish(node_script(job, "envcheck.sh", "a"))
    assert code == 1 and "node a: error: data file" in err and "does not decode" in err, err
    # More ranks x threads than the node has cores online.
    env_sh = (job / "env.sh").read_text()
    (job / "env.sh").write_text(env_sh.replace("HPCNN_THREADS_PER_RANK=1", "HPCNN_THREADS_PER_RANK=4096"))
    code, _, err = finish(node_script(job, "stage.sh", "b"))
    assert code == 1 and f"2 x 4096 = 8192 exceeds the {os.cpu_count()} cores online" in err, err
    (job / "env.sh").write_text(env_sh)
    # A missing binary on the node, an expected MPI version that is not there, a scratch variable not set.
    os.remove(tmp_path / "scratch/a/J1/bin/huffgpu-decode")
    code, _, err = finish(node_script(job, "envcheck.sh", "a"))
    assert code == 1 and "huffgpu-decode is missing" in err, err
    (job / "env.sh").write_text(env_sh.replace("HPCNN_MPI_VERSION=''", "HPCNN_MPI_VERSION=9.9.9"))
    code, _, err = finish(node_script(job, "stage.sh", "c"))
    assert code == 1 and "the cluster description expects '9.9.9'" in err, err
    # GPUs: a node whose nvidia-smi (a stand-in here, so that the outcome does not depend on this
    # host) lists fewer GPUs than gpus_per_node; then enough GPUs but an NCCL that is not the one expected.
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: Stand-in (UUID: GPU-0)'\n")
    os.chmod(fake / "nvidia-smi", 0o755)
    path = {"PATH": f"{fake}:{os.environ['PATH']}"}
    (job / "env.sh").write_text(env_sh.replace("HPCNN_GPUS_PER_NODE=0", "HPCNN_GPUS_PER_NODE=2"))
    code, _, err = finish(node_script(job, "stage.sh", "g1", env=path))
    assert code == 1 and "nvidia-smi sees 1 GPUs; gpus_per_node is 2" in err, err
    (job / "env.sh").write_text(env_sh.replace("HPCNN_GPUS_PER_NODE=0", "HPCNN_GPUS_PER_NODE=1")
                                .replace("HPCNN_NCCL_VERSION=''", "HPCNN_NCCL_VERSION=0.0.0"))
    code, _, err = finish(node_script(job, "stage.sh", "g2", env=path))
    assert code == 1 and "libnccl" in err and "0.0.0" in err, err
    (job / "env.sh").write_text(env_sh.replace(f"HPCNN_SCRATCH_PATTERN={tmp_path}/scratch",
                                               "HPCNN_SCRATCH_PATTERN='${HPCNN_NO_SUCH_VAR}'/scratch"))
    code, _, err = finish(node_script(job, "stage.sh", "d"))
    assert code == 1 and "uses ${HPCNN_NO_SUCH_VAR}, which is not set" in err, err


def test_none_scheduler_job_trains_from_staged_shards(tmp_path):
    """--submit with scheduler `none`: the job script runs in the background (mpirun, 2 ranks),
    stages, checks, trains from the staged huffgpu shards and cleans up."""
    job = tmp_path / "job"
    r = json.loads(launch("--cluster", description(tmp_path), "--config", train_config(tmp_path), "--job-dir", job,
                          "--submit", env={"OMP_NUM_THREADS": "1"}).stdout)
    assert r["job_id"].startswith("local-")
    out = job / "out" / "job.out"
    deadline = time.time() + 300
    while not re.search(r"cleaned up|error", out.read_text() if out.exists() else ""):
        assert time.time() < deadline, out.read_text() if out.exists() else "no job output"
        time.sleep(1)
    time.sleep(1)  # the last lines of the job
    text = out.read_text()
    assert "done:" in text, text
    scratch = tmp_path / "scratch" / os.uname().nodename.split(".")[0] / r["job_id"]
    assert f"train data: 512 samples from {scratch}/data/train_images/img.idx.huf" in text, text
    summary = json.loads((job / "out" / "summary.json").read_text().strip().splitlines()[-1])
    assert summary["world_size"] == 2 and summary["steps"] == 4
    assert (job / "out" / "trained.onnx").exists() and len((job / "out" / "metrics.jsonl").read_text().splitlines()) == 1
    assert not scratch.exists()  # cleaned up


def test_requeued_job_continues_from_its_checkpoint(tmp_path):
    """A job made with `-- --resume auto`, killed in its second epoch (as a preempted job is), then
    run again (as the scheduler requeues it): the second run continues from out/checkpoint."""
    job = tmp_path / "job"
    launch("--cluster", description(tmp_path), "--config", train_config(tmp_path, epochs=2), "--job-dir", job, "--", "--resume", "auto")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    first = subprocess.run(["bash", str(job / "job.sh")], env=dict(env, HPCNN_TEST_FAULT="1:throw:4"), capture_output=True,
                           text=True, timeout=300)
    assert first.returncode != 0 and "starting fresh" in first.stderr, first.stderr
    assert "injected fault" in first.stderr
    # The job's output ends with a line that says it failed, and with which status.
    assert re.search(r"hpcnn: job \S+: FAILED with exit status [1-9]", first.stderr.strip().splitlines()[-1]), first.stderr
    assert (job / "out" / "checkpoint").exists() and not (job / "out" / "trained.onnx").exists()
    second = subprocess.run(["bash", str(job / "job.sh")], env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "continuing from the checkpoint" in second.stderr and "at epoch 2" in second.stderr, second.stderr
    summary = json.loads((job / "out" / "summary.json").read_text().strip().splitlines()[-1])
    assert summary["world_size"] == 2 and summary["steps"] == 8  # 4 steps in each of the 2 epochs
    assert [json.loads(l)["epoch"] for l in (job / "out" / "metrics.jsonl").read_text().splitlines()] == [1, 2]


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the job as root, as a root user's --submit does")
def test_job_run_as_root_needs_no_mpirun_flag(tmp_path):
    """Open MPI refuses to start as root unless told: a job whose description does not add
    --allow-run-as-root (as a user's does not) still trains when it runs as root (env.sh tells
    Open MPI so), where it used to die at its first mpirun with exit 0 from --submit."""
    job = tmp_path / "job"
    desc = description(tmp_path)
    d = json.loads(desc.read_text())
    d["mpi"]["args"] = ["--oversubscribe"]
    desc.write_text(json.dumps(d))
    launch("--cluster", desc, "--config", train_config(tmp_path), "--job-dir", job)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_ALLOW_RUN_AS_ROOT")}
    p = subprocess.run(["bash", str(job / "job.sh")], capture_output=True, text=True, timeout=300,
                       env=dict(env, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "done:" in p.stdout and (job / "out" / "trained.onnx").exists()


def test_none_job_runs_from_a_job_dir_and_scratch_with_spaces(tmp_path):
    """The generated shell end to end with spaces (and a quote) in the job folder and in the scratch
    path: job.sh stages, checks, trains with 2 ranks and cleans up, every path whole."""
    job = tmp_path / "my jobs" / "r 1's"
    scratch = tmp_path / "scratch space" / "%n" / "%j"
    desc = description(tmp_path, scratch=str(scratch))
    launch("--cluster", desc, "--config", train_config(tmp_path), "--job-dir", job)
    shellcheck(job)
    p = subprocess.run(["bash", str(job / "job.sh")], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1", HPCNN_JOB_ID="J7", HPCNN_NODE="n1"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"done: {job}/out/trained.onnx" in p.stdout, p.stdout
    assert f"train data: 512 samples from {tmp_path}/scratch space/n1/J7/data/train_images/img.idx.huf" in p.stderr
    summary = json.loads((job / "out" / "summary.json").read_text().strip().splitlines()[-1])
    assert summary["world_size"] == 2 and (job / "out" / "trained.onnx").exists()
    assert (job / "out" / "stage.log").read_text().startswith("n1 staged ")
    assert not (tmp_path / "scratch space" / "n1" / "J7").exists()  # cleaned up
