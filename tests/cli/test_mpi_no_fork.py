"""No fork() on MPI ranks (issue 41 item 4): ONNX shape inference runs in a child process for its
crash isolation (lib/onnx/shapes.h), which an MPI process must not do (fork after MPI_Init is not
supported by Open MPI or MPICH: RDMA-registered memory is shared with the child). The tool frame
turns it off once MPI is initialised. Checked with an LD_PRELOAD probe that logs every fork() a
process makes, with the object file that called it: under mpirun no hpcnn tool forks; a plain run of
prune-rate (no MPI) still does, which shows that the probe sees the tools' forks."""
import os
import shutil
import subprocess

import pytest

import hpcnn_test as H
from test_dist_train import FM, config, fashion_mnist, tiny_cnn  # noqa: F401 (the dataset check)

PROBE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
pid_t fork(void) {
  const char* log = getenv("FORK_PROBE_LOG");
  Dl_info info;
  if (log && dladdr(__builtin_return_address(0), &info)) {
    char line[4096];
    int n = snprintf(line, sizeof line, "%d %s\n", (int)getpid(), info.dli_fname ? info.dli_fname : "?");
    int fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) { write(fd, line, n > 0 ? (size_t)n : 0); close(fd); }
  }
  pid_t (*real)(void) = (pid_t (*)(void))dlsym(RTLD_NEXT, "fork");
  return real();
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    d = tmp_path_factory.mktemp("probe")
    (d / "probe.c").write_text(PROBE)
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler (the build's) is needed for the fork probe"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", d / "probe.so", d / "probe.c", "-ldl"], check=True)
    return d / "probe.so"


def forks_by_tools(log):
    """The fork() calls made from an hpcnn tool's own code (the executable: the library modules are
    linked into it), not from the MPI runtime or the C library."""
    if not log.exists():
        return []
    tools = ("dist-train", "bn-polish", "prune-rate", "sparsify-fcl", "libhpcnn")
    return [line for line in log.read_text().splitlines() if os.path.basename(line.split(" ", 1)[1]).startswith(tools)]


def run(cmd, probe, log, ranks):
    """Runs cmd with the probe in its processes (under mpirun: in the ranks, not mpirun itself)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if ranks:
        cmd = [*H.launch(ranks, "-x", f"LD_PRELOAD={probe}", "-x", f"FORK_PROBE_LOG={log}"), *cmd]
    else:
        env.update(LD_PRELOAD=str(probe), FORK_PROBE_LOG=str(log))
    p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr
    return forks_by_tools(log)


def test_plain_prune_rate_forks_for_shape_inference(tmp_path, probe):
    """The probe's control: a process without MPI keeps the isolation (a fork from the tool)."""
    model = tiny_cnn(tmp_path / "tiny.onnx")
    forks = run([H.tool("prune-rate"), model, "--rate", "0.5", "-q"], probe, tmp_path / "forks.log", ranks=0)
    assert forks, "the probe saw no fork from prune-rate: it cannot show the MPI runs' absence of forks either"


@pytest.mark.parametrize("ranks", [1, 2])
def test_no_fork_on_mpi_ranks(tmp_path, probe, ranks):
    cfg = config(tmp_path, epochs=1, max_steps_per_epoch=2, final_polish_epochs=0)
    model = tmp_path / "tiny.onnx"
    log = tmp_path / "forks.log"
    # dist-train: training (its model log counts costs through shape inference) and --evaluate.
    assert run([H.tool("dist-train"), "--config", cfg, "-o", tmp_path / "t.onnx", "-f"], probe, log, ranks) == []
    assert run([H.tool("dist-train"), "--config", cfg, "--evaluate", tmp_path / "t.onnx"], probe, log, ranks) == []
    # bn-polish with --test-accuracy, and prune-rate's data-driven thresholds under mpirun.
    assert run([H.tool("bn-polish"), tmp_path / "t.onnx", "--config", cfg, "--samples", "512", "--test-accuracy",
                "-o", tmp_path / "p.onnx", "-f"], probe, log, ranks) == []
    assert run([H.tool("prune-rate"), model, "--config", cfg, "--batches", "2", "-o", tmp_path / "r.onnx", "-f", "-q"],
               probe, log, ranks) == []
