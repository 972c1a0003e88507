"""Every example of the tools' manuals runs as written (issue 41: "every example in the manuals runs
in a test"). A block marked `<!-- example -->` just above its ```sh fence is run with bash -e -o
pipefail in an empty folder laid out like the repository (configs/, scripts/, tests/, .venv and
build/tools/<tool>/<tool> link to the real ones; the tools are on PATH), after the files the manual
assumes a reader has (named in PREPARED below: a trained model, a data file) are put there. Blocks of
one manual run in order in one folder, as a reader types them.

The commands run as written except for these declared changes, which keep CI short and do not touch
what the example shows:
  - dist-train and the cluster launcher train 1 epoch of at most 20 steps (--epochs 1 --set
    max_steps_per_epoch=20, resp. --set max_steps_per_epoch=20 with the example's own --set epochs=1);
  - `tail -f FILE` of a background job waits until the job's last line ("done" or "FAILED") instead;
  - the scripts find the tools under test through HPCNN_BIN (scripts/tools.sh, the launcher's --bin);
  - `mpirun` runs as root in CI containers (OMPI_ALLOW_RUN_AS_ROOT in the environment, as the
    manuals say).
Blocks that are not marked are synopses or need what a test machine lacks (a Slurm cluster:
tests/cli/test_cluster_slurm.py runs that case on a local Slurm); this test lists them so that a new
example cannot go unmarked by accident."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hpcnn_test as H
from test_dist_train import FM, fashion_mnist  # noqa: F401 (the dataset check)

REPO = Path(__file__).resolve().parents[2]
TOOLS = ["dist-train", "prune-rate", "sparsify-fcl", "bn-polish", "huffgpu-encode", "huffgpu-decode"]
MANUALS = [f"tools/{t}/README.md" for t in TOOLS] + ["scripts/cluster/README.md"]
# Unmarked ```sh blocks, by manual: (first line of the block, why it does not run here).
NOT_RUN = {
    "scripts/cluster/README.md": [("python3 scripts/cluster/launch.py --cluster configs/cluster/slurm-gpu.json",
                                   "submits to a Slurm GPU cluster")],
}


def blocks(manual):
    """(marked, code) of every ```sh block of `manual`, in order."""
    text = (REPO / manual).read_text()
    return [(m.group(1) is not None, m.group(2)) for m in re.finditer(r"(<!-- example -->\n)?```sh\n(.*?)```", text, re.S)]


def prepare(work, manual):
    """The files the manual's examples take as given."""
    models = work / "build" / "models"
    if not (models / "fashion_mnist_cnn.onnx").exists():
        subprocess.run([sys.executable, str(REPO / "scripts" / "make_train_models.py"), str(models)], check=True,
                       capture_output=True)
    if manual == "tools/bn-polish/README.md":  # "a trained model", "a pruned model", the training images
        shutil.copy(models / "fashion_mnist_cnn.onnx", work / "trained.onnx")
        shutil.copy(models / "fashion_mnist_cnn.onnx", work / "pruned.onnx")
        os.symlink(f"{FM}/train-images-idx3-ubyte.gz", work / "train-images-idx3-ubyte.gz")
    elif manual == "tools/sparsify-fcl/README.md":  # the trained CNN of dist-train's example
        (work / "out").mkdir(exist_ok=True)
        shutil.copy(models / "fashion_mnist_cnn.onnx", work / "out" / "fashion_mnist_cnn.trained.onnx")
    elif manual == "tools/huffgpu-encode/README.md":  # dataset shards and two files
        (work / "shards").mkdir()
        subprocess.run(f"gunzip -c {FM}/t10k-images-idx3-ubyte.gz > shards/t10k-images.idx && "
                       f"gunzip -c {FM}/t10k-labels-idx1-ubyte.gz > shards/t10k-labels.idx && "
                       f"head -c 3000000 shards/t10k-images.idx > data.bin && cat shards/*.idx data.bin > big.bin",
                       shell=True, cwd=work, check=True)


def adapt(code):
    """The declared changes (module docstring)."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():  # one line per command
        if re.search(r"\bdist-train\b", line) and "--config" in line and "--evaluate" not in line:
            line = re.sub(r"\s--epochs \d+", "", line)
            line = re.sub(r"(\s*#.*)?$", r" --epochs 1 --set max_steps_per_epoch=20\1", line, count=1)
        if re.search(r"--set epochs=1\b", line) and "--submit" in line:
            line = line.replace("--submit", "--set max_steps_per_epoch=20 --submit")
        m = re.match(r"\s*tail -f (\S+)", line)
        if m:
            line = (f'for i in $(seq 600); do grep -qE "hpcnn: job .*: (done|FAILED)" {m.group(1)} 2>/dev/null && break; '
                    f'sleep 1; done; cat {m.group(1)}; ! grep -q FAILED {m.group(1)}')
        out.append(line)
    return "\n".join(out) + "\n"


def test_every_sh_block_is_marked_or_listed():
    for manual in MANUALS:
        unmarked = [code.splitlines()[0].rstrip(" \\") for marked, code in blocks(manual) if not marked]
        listed = [first for first, _ in NOT_RUN.get(manual, [])]
        assert unmarked == listed, f"{manual}: unmarked ```sh blocks {unmarked}, listed as not run {listed}"


@pytest.mark.parametrize("manual", [m for m in MANUALS if any(marked for marked, _ in blocks(m))])
def test_manual_examples_run(manual, tmp_path, fashion_mnist):  # noqa: F811
    work, bindir = tmp_path / "work", tmp_path / "bin"
    (work / "build" / "tools").mkdir(parents=True)
    bindir.mkdir()
    for t in TOOLS:
        os.symlink(H.tool(t), bindir / t)
        (work / "build" / "tools" / t).mkdir()
        os.symlink(H.tool(t), work / "build" / "tools" / t / t)
    for d in ("configs", "scripts", "tests", ".venv"):
        os.symlink(REPO / d, work / d)
    prepare(work, manual)
    env = dict(os.environ, PATH=f"{bindir}:{os.path.dirname(H.MPIRUN)}:{os.environ['PATH']}", HPCNN_BIN=H.BIN_DIR)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for marked, code in blocks(manual):
        if not marked:
            continue
        p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", adapt(code)], cwd=work, env=env, capture_output=True,
                           text=True, timeout=900)
        assert p.returncode == 0, f"{manual}: the example\n{code}\nexited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
