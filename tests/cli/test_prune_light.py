"""prune-rate on the ONNX model-zoo 'light' graphs (ResNet-50, VGG-19, SqueezeNet, AlexNet;
opset 9, IR version 3) from the onnx package, with seeded random weights written by
tests/fixtures/make_light_models.py."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest

from hpcnn_test import FIXTURE_DIR, assert_close, count_macs, count_params, ort_run, prune, tool

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MODELS = ["resnet50", "vgg19", "squeezenet", "bvlc_alexnet"]


@pytest.fixture(scope="module")
def light():
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "fixtures", "make_light_models.py"), FIXTURE_DIR,
                    "--models", ",".join(MODELS)], check=True)
    return {m: os.path.join(FIXTURE_DIR, f"{m}.onnx") for m in MODELS}


@pytest.mark.parametrize("name", MODELS)
def test_pruned_light_model(light, name, tmp_path):
    src, dst = light[name], str(tmp_path / f"{name}_pruned.onnx")
    report = prune(src, dst, "--threshold", "0.01")
    pruned = onnx.load(dst)
    onnx.checker.check_model(dst, full_check=True)
    original = onnx.load(src)
    (a,), feeds = ort_run(src)
    (b,), _ = ort_run(dst, feeds)
    assert b.shape == a.shape and np.isfinite(b).all()
    t = report["totals"]
    assert t["params_before"] == count_params(original)
    assert t["params_after"] == count_params(pruned)
    assert t["macs_before"] == count_macs(original)
    assert t["macs_after"] == count_macs(pruned)
    assert t["params_after"] < t["params_before"] and t["macs_after"] < t["macs_before"]
    # The classifier reaches the graph output and is never pruned.
    assert not report["layers"][-1]["prunable"] and "graph output" in report["layers"][-1]["reason"]


def test_resnet50_groups(light, tmp_path):
    """Residual Sum nodes tie the projection shortcut and the last conv of each block of a stage."""
    report = prune(light["resnet50"], str(tmp_path / "p.onnx"), "--threshold", "0.01")
    sizes = sorted(len(g["layers"]) for g in report["groups"] if len(g["layers"]) > 1)
    assert sizes == [4, 4, 5, 7]  # stages with 3, 4, 6, 3 blocks: blocks + 1 shortcut


@pytest.mark.parametrize("name", ["resnet50", "squeezenet"])
def test_rate_zero_equals_original(light, name, tmp_path):
    dst = str(tmp_path / "p.onnx")
    report = prune(light[name], dst, "--threshold", "0")
    assert report["totals"]["params_after"] == report["totals"]["params_before"]
    (a,), feeds = ort_run(light[name])
    (b,), _ = ort_run(dst, feeds)
    assert_close(b, a)


def test_sigterm_leaves_no_partial_output(light, tmp_path):
    """SIGTERM while the 575 MB model is being written: the readiness sign is the temporary
    output file; the clean-up path must remove it and leave no output."""
    out = tmp_path / "out.onnx"
    p = subprocess.Popen([tool("prune-rate"), light["vgg19"], "--threshold", "0.01", "-o", out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not any(f.startswith(".out.onnx.tmp.") for f in os.listdir(tmp_path)):
        assert p.poll() is None, "prune-rate ended before it started writing the output"
        assert time.monotonic() < deadline, "no temporary output file within 120 s"
        time.sleep(0.001)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGTERM  # the handler removed the file, then re-raised the signal
    assert os.listdir(tmp_path) == []


def test_example_thresholds_file(light, tmp_path):
    cfg = os.path.join(ROOT, "configs", "resnet50_thresholds.json")
    p = subprocess.run([tool("prune-rate"), light["resnet50"], "--threshold", "0.02", "--thresholds", cfg,
                        "-o", tmp_path / "p.onnx"], capture_output=True, text=True, check=True)
    assert "warn" not in p.stderr, p.stderr  # every name in the example is a prunable layer
    import json
    layers = {L["name"]: L for L in json.loads(p.stdout)["layers"]}
    assert layers["n0"]["threshold"] == 0.002 and layers["n146"]["threshold"] == 0.004
    assert layers["n36"]["threshold"] == 0.02


CAFFE2 = {"densenet121": 120, "inception_v2": 69, "shufflenet": 17}  # prunable groups (all but the classifier's)


@pytest.mark.parametrize("name", sorted(CAFFE2))
def test_caffe2_scale_layers_and_channel_shuffles(name, tmp_path):
    """DenseNet-121 and Inception-v2 scale every BatchNormalization output with Mul/Add operands
    computed by Unsqueeze from [C] constants; ShuffleNet shuffles channels with Reshape-Transpose-
    Reshape. Both used to fix the channels they touch (no prunable group in DenseNet-121 or
    Inception-v2, one in ShuffleNet); followed, every group but the classifier's is prunable and the
    pruned graph runs in onnxruntime with the costs counted independently."""
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "fixtures", "make_light_models.py"), str(tmp_path),
                    "--models", name], check=True)
    src, dst = str(tmp_path / f"{name}.onnx"), str(tmp_path / "p.onnx")
    report = prune(src, dst, "--rate", "0.3")
    fixed = [g for g in report["groups"] if not g["prunable"]]
    assert report["totals"]["prunable_groups"] == CAFFE2[name], [g["reason"] for g in fixed]
    assert len(fixed) == 1 and "graph output" in fixed[0]["reason"], fixed
    onnx.checker.check_model(dst, full_check=True)
    (a,), feeds = ort_run(src)
    (b,), _ = ort_run(dst, feeds)
    assert b.shape == a.shape and np.isfinite(b).all()
    pruned = onnx.load(dst)
    assert report["totals"]["params_after"] == count_params(pruned) < report["totals"]["params_before"]
    assert report["totals"]["macs_after"] == count_macs(pruned)
