"""`cmake --install` as an HPC site uses it: the build installed into a temporary prefix, then used
as a user would with nothing of the build tree on PATH: Debian's Lmod loads the generated module
file, each tool answers --version from PATH and has a man page (`man TOOL`, the system's pages
still found), hpcnn-launch prepares a job with the installed tools and configurations, and a
CMake project of its own builds against find_package(hpcnn) and reads a model (its node count
against the onnx package's)."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import onnx
import pytest

import hpcnn_test as H
from test_dist_train import tiny_cnn

BUILD = Path(H.BIN_DIR).parent
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
TOOLS = ["prune-rate", "sparsify-fcl", "huffgpu-encode", "huffgpu-decode", "dist-train", "bn-polish"]


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    p = tmp_path_factory.mktemp("prefix") / "hpcnn"
    r = subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(p)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return p


def as_user(prefix, script, cwd):
    """bash with a clean environment (no build tree on PATH), Lmod set up, the module loaded."""
    assert os.path.exists(LMOD_INIT), "scripts/setup.sh installs Debian's lmod"
    env = {"HOME": os.environ.get("HOME", "/root"), "PATH": "/usr/bin:/bin", "TERM": "dumb", "LANG": "C.UTF-8"}
    full = f"set -e; source {LMOD_INIT}; module use {prefix}/share/modulefiles; module load hpcnn; {script}"
    return subprocess.run(["bash", "--norc", "--noprofile", "-c", full], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=600)


def test_layout(prefix):
    for t in TOOLS + ["hpcnn-launch"]:
        assert os.access(prefix / "bin" / t, os.X_OK), t
        assert t == "hpcnn-launch" or (prefix / "share" / "man" / "man1" / f"{t}.1").is_file(), t
    assert (prefix / "share" / "hpcnn" / "configs" / "fashion_mnist_cnn.json").is_file()
    assert (prefix / "share" / "hpcnn" / "cluster" / "launch.py").is_file()
    assert (prefix / "lib" / "cmake" / "hpcnn" / "hpcnnConfig.cmake").is_file()
    assert (prefix / "include" / "hpcnn" / "core" / "version.h").is_file()
    module = (prefix / "share" / "modulefiles" / "hpcnn" / "0.1.0").read_text()
    assert module.startswith("#%Module") and f"set root {{{prefix}}}" in module


def test_module_load_tools_and_man_pages(prefix, tmp_path):
    script = "; ".join([f"{t} --version" for t in TOOLS] +
                       [f"man -P cat {t} | head -n 8" for t in TOOLS] +
                       ["command -v prune-rate", "echo CMAKE_PREFIX_PATH=$CMAKE_PREFIX_PATH", "echo MANPATH=$MANPATH"])
    r = as_user(prefix, script, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    for t in TOOLS:
        assert f"{t} (hpcnn 0.1.0)" in r.stdout
        assert f"{t.upper()}(1)" in r.stdout and f"{t} - " in r.stdout.replace("  - ", " - "), (t, r.stdout)
    assert f"{prefix}/bin/prune-rate" in r.stdout and f"CMAKE_PREFIX_PATH={prefix}" in r.stdout
    assert f"MANPATH={prefix}/share/man::" in r.stdout  # the trailing empty entry keeps man's default path


def test_hpcnn_launch_uses_the_installed_tools(prefix, tmp_path):
    cfg = json.loads((prefix / "share" / "hpcnn" / "configs" / "fashion_mnist_cnn.json").read_text())
    cfg["model"] = str(tiny_cnn(str(tmp_path / "tiny.onnx")))
    (tmp_path / "train.json").write_text(json.dumps(cfg))
    r = as_user(prefix, f"hpcnn-launch --cluster {prefix}/share/hpcnn/configs/cluster/local.json "
                        f"--config {tmp_path}/train.json --job-dir {tmp_path}/job --dry-run", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{prefix}/bin/dist-train" in r.stdout + r.stderr
    assert not (tmp_path / "job").exists()


def test_find_package_builds_a_program_of_ones_own(prefix, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.22)\nproject(count_nodes CXX)\nset(CMAKE_CXX_STANDARD 20)\n"
        "find_package(hpcnn 0.1 REQUIRED)\nadd_executable(count_nodes main.cpp)\n"
        "target_link_libraries(count_nodes PRIVATE hpcnn::onnx)\n")
    (src / "main.cpp").write_text(
        '#include <iostream>\n#include "core/version.h"\n#include "onnx/model.h"\n'
        "int main(int argc, char** argv) {\n"
        "  if (argc != 2) return 1;\n"
        "  const hpcnn::onnxu::Model m = hpcnn::onnxu::load_model(argv[1]);\n"
        '  std::cout << hpcnn::kVersion << " " << m.proto.graph().node_size() << "\\n";\n}\n')
    model = tiny_cnn(str(tmp_path / "tiny.onnx"))
    cmake = shutil.which("cmake")
    r = as_user(prefix, f"{cmake} -S {src} -B {tmp_path}/b -DCMAKE_BUILD_TYPE=Release > {tmp_path}/cfg.log && "
                        f"{cmake} --build {tmp_path}/b > {tmp_path}/build.log && {tmp_path}/b/count_nodes {model}", tmp_path)
    logs = "".join(p.read_text() for p in tmp_path.glob("*.log"))
    assert r.returncode == 0, r.stdout + r.stderr + logs
    assert r.stdout.split() == ["0.1.0", str(len(onnx.load(model).graph.node))]


def test_scripts_run_the_installed_tools(prefix, tmp_path):
    """scripts/prune_loop.py and scripts/pipeline.sh find installed tools: through HPCNN_BIN set to
    the prefix's bin/ (they used to look for bin/TOOL/TOOL: "Not a directory", exit 126), and on
    PATH when no build tree is beside them (a copy of scripts/ alone)."""
    repo = Path(__file__).resolve().parents[2]
    model = tiny_cnn(str(tmp_path / "tiny.onnx"))
    (tmp_path / "c.json").write_text("{}")
    copy = tmp_path / "copy"
    shutil.copytree(repo / "scripts", copy / "scripts")
    loop_args = f"{model} --config {tmp_path}/c.json --out {tmp_path}/loop --keep no_such_layer"
    for how, script in ((f"HPCNN_BIN={prefix}/bin python3 {repo}/scripts/prune_loop.py", "loop"),
                        (f"python3 {copy}/scripts/prune_loop.py", "loop"),
                        (f"HPCNN_BIN={prefix}/bin bash {repo}/scripts/pipeline.sh", "pipeline"),
                        (f"bash {copy}/scripts/pipeline.sh", "pipeline")):
        args = loop_args if script == "loop" else f"{tmp_path}/no_such_pipeline.json"
        r = as_user(prefix, f"{how} {args}", tmp_path)
        # The tool ran and refused the input: found and executed, not "Not a directory" (126).
        assert r.returncode in (1, 2), (how, r.returncode, r.stderr)
        assert "Not a directory" not in r.stderr and "no dist-train" not in r.stderr and "no prune-rate" not in r.stderr, r.stderr
        if script == "loop":
            assert "--keep 'no_such_layer' does not fit" in r.stderr, r.stderr
    # Without the tools anywhere: a clear error naming where it looked.
    r = subprocess.run(["/usr/bin/python3", str(copy / "scripts" / "prune_loop.py"), *loop_args.split()], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}, cwd=tmp_path)
    assert r.returncode == 1 and "prune_loop: error: no prune-rate" in r.stderr and "not on PATH" in r.stderr, r.stderr
