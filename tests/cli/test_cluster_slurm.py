"""A real Slurm on this machine: munged, slurmctld and two slurmd daemons (node1, node2: two node
names on one host, each with its own scratch folder through scratch = .../%n/...), configured in a
temporary folder without cgroups (proctrack/linuxproc, task/none) on free ports, stopped at the
end. A job made by scripts/cluster/launch.py for 2 ranks is submitted with sbatch and followed with
scontrol (there is no accounting database): it completes, each node staged once, and dist-train
trained from the staged huffgpu shards. A job whose environment check fails (the nodes have fewer
cores than the description says) fails fast, with the reason in its output and before training.
Needs root (the daemons run as root here): skipped with a message without it. The Debian packages
(slurmctld, slurmd, slurm-client, munge) come from scripts/setup.sh: their absence is a failure."""
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from test_cluster_launch import launch, train_config
from test_dist_train import fashion_mnist  # noqa: F401 (the dataset check)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the local Slurm cluster needs root (its daemons run as root)")


# Slurm is told each node has twice the host's cores (config_overrides), so that a job can ask for
# more cores than a node has online and the environment check, not Slurm, must catch it.
CPUS = 2 * os.cpu_count()


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


SLURM_CONF = """ClusterName=hpcnntest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
AuthType=auth/munge
AuthInfo=socket={dir}/munge/socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.%n.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
InactiveLimit=0
MinJobAge=3600
NodeName=node1 NodeHostname={host} NodeAddr=127.0.0.1 Port={port1} CPUs={cpus} State=UNKNOWN
NodeName=node2 NodeHostname={host} NodeAddr=127.0.0.1 Port={port2} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture(scope="module")
def slurm():
    for exe in ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "shellcheck"):
        assert shutil.which(exe), f"{exe} is missing: scripts/setup.sh installs munge, slurmctld, slurmd, slurm-client"
    d = Path(tempfile.mkdtemp(prefix="hpcnn-slurm-"))  # short: the munge socket path has a length limit
    for sub in ("munge", "state", "spool/node1", "spool/node2", "log"):
        (d / sub).mkdir(parents=True)
    os.chmod(d / "munge", 0o700)
    key = d / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    ctld_port, port1, port2 = free_ports(3)
    # slurmd 22.05 initialises a cgroup plugin even with proctrack/linuxproc and task/none, and
    # refuses to start where no cgroup file system is mounted at /sys/fs/cgroup (a container, a
    # chroot): cgroup.conf (read from slurm.conf's folder) points the v1 plugin at an empty
    # folder instead. Nothing uses it.
    (d / "cgroup").mkdir()
    (d / "cgroup.conf").write_text(f"CgroupPlugin=cgroup/v1\nCgroupMountpoint={d}/cgroup\nCgroupAutomount=no\n")
    conf = d / "slurm.conf"
    conf.write_text(SLURM_CONF.format(dir=d, ctld_port=ctld_port, port1=port1, port2=port2,
                                      host=socket.gethostname().split(".")[0], cpus=CPUS))
    env = dict(os.environ, SLURM_CONF=str(conf))
    m = d / "munge"
    started = []

    def start(cmd):
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        logs = "\n".join(f"{f}:\n{f.read_text()[-1500:]}" for f in sorted((d / "log").iterdir()))
        assert p.returncode == 0, f"{' '.join(cmd)}: {p.stderr}\n{logs}"
        started.append(cmd[0])

    try:
        start(["munged", "-f", f"--socket={m}/socket", f"--key-file={key}", f"--pid-file={m}/pid",
               f"--log-file={m}/log", f"--seed-file={m}/seed"])
        start(["slurmctld", "-f", str(conf)])
        start(["slurmd", "-f", str(conf), "-N", "node1"])
        start(["slurmd", "-f", str(conf), "-N", "node2"])
        deadline = time.time() + 60
        while True:
            s = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env=env).stdout
            if s.count("idle") == 2:
                break
            assert time.time() < deadline, f"the Slurm nodes did not come up: {s}\n" + \
                "\n".join(p.read_text()[-2000:] for p in (d / "log").iterdir())
            time.sleep(1)
        yield {"dir": d, "env": env}
    finally:
        subprocess.run(["scontrol", "shutdown"], capture_output=True, env=env, timeout=60)
        for pid_file in list(d.glob("slurm*.pid")):
            try:
                os.kill(int(pid_file.read_text()), 15)
            except (OSError, ValueError):
                pass
        subprocess.run(["munged", "-s", f"--socket={m}/socket"], capture_output=True, timeout=60)
        time.sleep(1)
        shutil.rmtree(d, ignore_errors=True)


def wait_for_job(slurm, job_id, timeout=600):
    """The job's final state and its scontrol record."""
    deadline = time.time() + timeout
    while True:
        s = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, env=slurm["env"]).stdout
        state = re.search(r"JobState=(\S+)", s).group(1)
        if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return state, s
        assert time.time() < deadline, f"job {job_id} still {state} after {timeout} s"
        time.sleep(1)


def cluster(tmp, **over):
    d = {"name": "hpcnn-test", "scheduler": "slurm", "nodes": 2, "ranks_per_node": 1, "cores_per_node": CPUS,
         "threads_per_rank": 1, "queue": "debug", "wall_time": "00:10:00",
         "scratch": str(tmp / "scratch" / "%n" / "job-%j"),
         # Both emulated nodes share this host's cores: no binding. mpirun runs as root here.
         "mpi": {"flavour": "openmpi", "bind": "none", "args": ["--allow-run-as-root"]},
         "environment": {"OMPI_MCA_btl_tcp_if_include": "lo"}}
    d.update(over)
    p = tmp / "cluster.json"
    p.write_text(json.dumps(d))
    return p


def test_slurm_job_trains_from_staged_shards(slurm, tmp_path):
    job = tmp_path / "job"
    r = json.loads(launch("--cluster", cluster(tmp_path), "--config", train_config(tmp_path), "--job-dir", job,
                          "--submit", env=slurm["env"]).stdout)
    job_id = r["job_id"]
    assert re.fullmatch(r"\d+", job_id)
    start = time.time()
    state, record = wait_for_job(slurm, job_id)
    output = (job / "out" / f"job.{job_id}.out").read_text()
    assert state == "COMPLETED", f"{record}\n{output}"
    # Each node staged once, into its own scratch folder, and passed its environment check.
    stage = sorted(line.split()[0] for line in (job / "out" / "stage.log").read_text().splitlines())
    assert stage == ["node1", "node2"], stage
    assert sorted((job / "out" / "envcheck.log").read_text().splitlines()) == ["node1 ok", "node2 ok"]
    for n in ("node1", "node2"):
        assert f"hpcnn: node {n}: ok: data data/train_images/img.idx.huf" in output, output
    # Rank 0 (node1) read the shard staged on node1, huffgpu-compressed.
    scratch1 = tmp_path / "scratch" / "node1" / f"job-{job_id}"
    assert f"train data: 512 samples from {scratch1}/data/train_images/img.idx.huf" in output, output
    summary = json.loads((job / "out" / "summary.json").read_text().strip().splitlines()[-1])
    assert summary["world_size"] == 2 and summary["steps"] == 4 and summary["epochs_run"] == 1
    assert (job / "out" / "trained.onnx").stat().st_size > 0
    assert len((job / "out" / "metrics.jsonl").read_text().splitlines()) == 1
    assert not scratch1.exists() and not (tmp_path / "scratch" / "node2" / f"job-{job_id}").exists()
    print(f"slurm job {job_id}: completed in {time.time() - start:.1f} s")


def test_failing_environment_check_fails_the_job_before_training(slurm, tmp_path):
    """The description says twice the host's cores per node (so does slurm.conf); the host has
    half of them online: 2 ranks x (cores online) threads do not fit, the check says so, and the
    job fails without training."""
    n = os.cpu_count()
    job = tmp_path / "job"
    r = json.loads(launch("--cluster", cluster(tmp_path, ranks_per_node=2, threads_per_rank=n), "--config",
                          train_config(tmp_path), "--job-dir", job, "--submit", env=slurm["env"]).stdout)
    start = time.time()
    state, record = wait_for_job(slurm, r["job_id"])
    output = (job / "out" / f"job.{r['job_id']}.out").read_text()
    assert state == "FAILED", f"{record}\n{output}"
    assert f"ranks x threads = 2 x {n} = {2 * n} exceeds the {n} cores online on this node" in output, output
    assert "training with" not in output and not (job / "out" / "trained.onnx").exists()
    # The failed job removed what it had staged on both nodes (job.sh's EXIT trap).
    for n in ("node1", "node2"):
        assert not (tmp_path / "scratch" / n / f"job-{r['job_id']}").exists(), n
    assert time.time() - start < 120, "the job did not fail fast"
