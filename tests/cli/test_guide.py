"""docs/your-model.md as a user follows it: every block marked `<!-- guide -->` runs, in order, in
one empty folder, with the tools on PATH (links to the build's) and HPCNN_REPO set: shell blocks
with bash -e, Python blocks with this Python. The PyTorch export block (`<!-- guide: torch -->`)
runs where HPCNN_GUIDE_TORCH=1 names a Python with PyTorch in HPCNN_GUIDE_TORCH_PYTHON (checked by
hand; CI installs no PyTorch): otherwise the same network is made with the onnx package. Then the
outputs are checked: every tool wrote its model, the trained model learned (test accuracy well
above chance), the BatchNorms were polished, the pipeline wrote its report."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import hpcnn_test as H
from test_dist_train import fashion_mnist  # noqa: F401 (the dataset check)

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "your-model.md"
TOOLS = ["dist-train", "prune-rate", "sparsify-fcl", "bn-polish", "huffgpu-encode", "huffgpu-decode"]


def blocks():
    """(marker, language, code) of each marked block, in order."""
    text = GUIDE.read_text()
    return [(m.group(1) or "", m.group(2), m.group(3))
            for m in re.finditer(r"<!-- guide(?:: (\w+))? -->\n```(\w+)\n(.*?)```", text, re.S)]


def the_same_network(path):
    """The PyTorch block's network, made with the onnx package (what the export writes, less names)."""
    rng = np.random.default_rng(0)
    def w(*s):
        return numpy_helper.from_array((rng.standard_normal(s) * np.sqrt(2.0 / int(np.prod(s[1:])))).astype(np.float32))
    inits, nodes, x = [], [], "x"
    for i, (cin, cout) in enumerate([(3, 16), (16, 32)]):
        for name, arr in ((f"c{i}.w", None), (f"c{i}.b", np.zeros(cout)), (f"bn{i}.s", np.ones(cout)),
                          (f"bn{i}.b", np.zeros(cout)), (f"bn{i}.m", np.zeros(cout)), (f"bn{i}.v", np.ones(cout))):
            t = w(cout, cin, 3, 3) if arr is None else numpy_helper.from_array(arr.astype(np.float32))
            t.name = name
            inits.append(t)
        nodes += [helper.make_node("Conv", [x, f"c{i}.w", f"c{i}.b"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("BatchNormalization", [f"c{i}", f"bn{i}.s", f"bn{i}.b", f"bn{i}.m", f"bn{i}.v"], [f"n{i}"]),
                  helper.make_node("Relu", [f"n{i}"], [f"r{i}"]),
                  helper.make_node("MaxPool", [f"r{i}"], [f"p{i}"], kernel_shape=[2, 2], strides=[2, 2])]
        x = f"p{i}"
    for name, arr in (("fc1.w", w(128, 32 * 7 * 7)), ("fc1.b", numpy_helper.from_array(np.zeros(128, np.float32))),
                      ("fc2.w", w(10, 128)), ("fc2.b", numpy_helper.from_array(np.zeros(10, np.float32)))):
        arr.name = name
        inits.append(arr)
    nodes += [helper.make_node("Flatten", [x], ["f"]), helper.make_node("Gemm", ["f", "fc1.w", "fc1.b"], ["h"], transB=1),
              helper.make_node("Relu", ["h"], ["hr"]), helper.make_node("Gemm", ["hr", "fc2.w", "fc2.b"], ["logits"], transB=1)]
    g = helper.make_graph(nodes, "guide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 28, 28])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def test_every_command_of_the_guide_runs(tmp_path):
    work, bindir = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    bindir.mkdir()
    for t in TOOLS:
        os.symlink(H.tool(t), bindir / t)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", HPCNN_REPO=str(REPO))
    if os.geteuid() == 0:  # Open MPI as root, as the guide says
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    ran = []
    for marker, lang, code in blocks():
        if marker == "torch":
            if os.environ.get("HPCNN_GUIDE_TORCH") == "1":
                p = subprocess.run([os.environ["HPCNN_GUIDE_TORCH_PYTHON"], "-c", code], cwd=work, env=env,
                                   capture_output=True, text=True, timeout=600)
                assert p.returncode == 0, p.stderr
            else:
                the_same_network(work / "model.onnx")
            ran.append("export")
            continue
        cmd = ["bash", "-e", "-c", code] if lang == "sh" else [sys.executable, "-c", code]
        p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=1200)
        assert p.returncode == 0, f"block {len(ran) + 1} ({lang}) failed:\n{code}\n{p.stdout}\n{p.stderr}"
        ran.append(lang)
        (work / f".block{len(ran)}.out").write_text(p.stdout)
    assert ran == ["export", "python", "sh", "sh", "sh"], ran
    # What the blocks made: every tool's output, a model that learned, polished BatchNorms.
    for f in ("trained.onnx", "pruned.onnx", "tuned.onnx", "slim.onnx", "polished.onnx", "run/report.md"):
        assert (work / f).exists(), f
    trained = json.loads((work / "train.summary.json").read_text().strip().splitlines()[-1])
    assert trained["test_accuracy"] > 0.7, trained  # 2 epochs on 5,000 images: about 80%; chance is 10%
    evaluation = json.loads((work / ".block4.out").read_text().strip().splitlines()[-1])
    assert evaluation["model"] == "polished.onnx" and evaluation["test_accuracy"] > 0.3, evaluation
    rates = json.loads((work / "rates.json").read_text())
    assert rates["totals"]["params_after"] <= rates["totals"]["params_before"]
    assert json.loads((work / "fcl.json").read_text())["layer_compression"] >= 8
    assert len(json.loads((work / "polish.json").read_text())["layers"]) == 2
    bns = [n for n in onnx.load(work / "model.onnx").graph.node if n.op_type == "BatchNormalization"]
    assert len(bns) == 2 and all(a.name != "training_mode" or a.i == 0 for n in bns for a in n.attribute)
    report = json.loads((work / "run" / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == ["train", "prune", "sparsify", "finetune", "polish"]
