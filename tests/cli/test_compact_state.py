"""Optimizer state kept only for the weights that survive pruning (issue 45, item 3): a model
pruned by `prune-rate --unstructured R` (the exact zero count per weight, bad R refused), trained
by dist-train with `sparse: true` (the zeros at start are the fixed mask) or with `mask` naming
the pruned model: the pruned entries are exactly zero in the output ONNX (weight decay on, SGD
and LARS), the parameter memory of the summary equals its closed form (f32 weights, gradients,
fused buffer and state, i32 positions), and a run killed and resumed from its checkpoint equals
the uninterrupted run bit for bit, zeros included (the compact state goes through the checkpoint)."""
import json
import math
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import hpcnn_test as H
from test_dist_train import FM, config, dist_train, fashion_mnist, ok, tiny_cnn, weights  # noqa: F401


def prune_unstructured(model, out, rate, *extra):
    return subprocess.run([H.tool("prune-rate"), str(model), "--unstructured", str(rate), "-o", str(out), *map(str, extra)],
                          capture_output=True, text=True, timeout=120)


PARAMS = ("c1.w", "bn.scale", "bn.bias", "c2.w", "c2.b", "fc.w", "fc.b")  # the trained tensors of tiny_cnn


def test_unstructured_pruning_zero_count_is_exact(tmp_path):
    tiny_cnn(str(tmp_path / "tiny.onnx"))
    before = weights(tmp_path / "tiny.onnx")
    for rate in (0.8, 0.9, 0.37):
        out = tmp_path / f"p{rate}.onnx"
        p = prune_unstructured(tmp_path / "tiny.onnx", out, rate)
        assert p.returncode == 0, p.stderr
        rep = json.loads(p.stdout)
        after = weights(out)
        assert [l["weight"] for l in rep["layers"]] == ["c1.w", "c2.w", "fc.w"]
        for name, w0 in before.items():
            w1 = after[name]
            assert w1.shape == w0.shape, name
            if name not in ("c1.w", "c2.w", "fc.w"):
                np.testing.assert_array_equal(w1, w0, err_msg=name)  # biases, BatchNorm: untouched
                continue
            assert np.count_nonzero(w0 == 0) == 0  # the fixture has no zeros of its own
            k = math.floor(rate * w0.size)
            assert np.count_nonzero(w1 == 0) == k, name
            kept = w1 != 0
            np.testing.assert_array_equal(w1[kept], w0[kept], err_msg=name)  # survivors keep their values
            assert np.abs(w0[~kept]).max() <= np.abs(w0[kept]).min(), name  # the smallest magnitudes went
            entry = next(l for l in rep["layers"] if l["weight"] == name)
            assert entry["elements"] == w0.size and entry["zeros"] == k
        m = onnx.load(out)
        onnx.checker.check_model(m, full_check=True)
        ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("bad", ["-0.1", "1", "1.5", "nan", "abc"])
def test_unstructured_bad_rate_is_refused(tmp_path, bad):
    tiny_cnn(str(tmp_path / "tiny.onnx"))
    p = prune_unstructured(tmp_path / "tiny.onnx", tmp_path / "out.onnx", bad)
    assert p.returncode == 1 and "--unstructured" in p.stderr, p.stderr
    assert not (tmp_path / "out.onnx").exists() and p.stdout == ""


def test_unstructured_refuses_other_modes(tmp_path):
    tiny_cnn(str(tmp_path / "tiny.onnx"))
    p = prune_unstructured(tmp_path / "tiny.onnx", tmp_path / "out.onnx", 0.5, "--rate", "0.5")
    assert p.returncode == 1 and "--unstructured cannot be combined with --rate" in p.stderr, p.stderr
    assert not (tmp_path / "out.onnx").exists()


def closed_form(model_path, sparse):
    """Bytes per category, from the model's zeros: N entries, T kept (all of the rank < 2 tensors)."""
    w = weights(model_path)
    full = sum(w[k].size for k in PARAMS)
    dense_elems = sum(w[k].size for k in PARAMS if w[k].ndim < 2)
    kept = dense_elems + sum(np.count_nonzero(w[k]) for k in PARAMS if w[k].ndim >= 2) if sparse else full
    return {"weights": 4 * full, "gradients": 4 * full, "fused": 4 * kept, "state": 4 * kept,
            "positions": 4 * (kept - dense_elems) if sparse else 0}


@pytest.mark.parametrize("optimizer", ["sgd", "lars"])
def test_pruned_entries_stay_zero_and_memory_is_compact(tmp_path, optimizer):
    tiny_cnn(str(tmp_path / "dense.onnx"))
    p = prune_unstructured(tmp_path / "dense.onnx", tmp_path / "tiny.onnx", 0.9)
    assert p.returncode == 0, p.stderr
    opt = {"type": optimizer, "momentum": 0.9, "weight_decay": 5e-3}
    if optimizer == "lars":
        opt["trust_coefficient"] = 0.02
    cfg = config(tmp_path, sparse=True, epochs=1, final_polish_epochs=0, optimizer=opt)
    s = ok(dist_train("--config", cfg, ranks=2))
    before, after = weights(tmp_path / "tiny.onnx"), weights(tmp_path / "trained.onnx")
    for k in ("c1.w", "c2.w", "fc.w"):
        assert np.all(after[k][before[k] == 0] == 0), k  # exactly zero after weight decay
        assert np.mean(after[k][before[k] != 0] != before[k][before[k] != 0]) > 0.9, k  # the survivors train
    mem, want = s["parameter_memory"], closed_form(tmp_path / "tiny.onnx", True)
    for k, v in want.items():
        assert mem[k] == v, (k, mem, want)
    assert mem["optimizer"] == mem["fused"] + mem["state"] + mem["positions"]
    # Against the dense run of the same model: the state and its positions at 90% zeros.
    d = tmp_path / "dense_run"
    d.mkdir()
    cfg_d = config(d, model=str(tmp_path / "tiny.onnx"), epochs=1, final_polish_epochs=0, optimizer=opt, max_steps_per_epoch=1)
    sd = ok(dist_train("--config", cfg_d))
    dmem, dwant = sd["parameter_memory"], closed_form(tmp_path / "tiny.onnx", False)
    for k, v in dwant.items():
        assert dmem[k] == v, (k, dmem, dwant)
    assert (mem["state"] + mem["positions"]) <= 0.35 * dmem["state"], (mem, dmem)


def test_mask_model_fixes_the_zeros(tmp_path):
    """`mask` names the pruned model; training starts from the unpruned weights: the masked-out
    entries are zeroed at start and stay zero, the memory follows the mask."""
    tiny_cnn(str(tmp_path / "tiny.onnx"))
    assert prune_unstructured(tmp_path / "tiny.onnx", tmp_path / "mask.onnx", 0.8).returncode == 0
    cfg = config(tmp_path, mask=str(tmp_path / "mask.onnx"), epochs=1, final_polish_epochs=0)
    s = ok(dist_train("--config", cfg, ranks=2))
    mask, after = weights(tmp_path / "mask.onnx"), weights(tmp_path / "trained.onnx")
    for k in ("c1.w", "c2.w", "fc.w"):
        assert np.all(after[k][mask[k] == 0] == 0), k
        assert np.mean(after[k][mask[k] != 0] != 0) > 0.99, k
    want = closed_form(tmp_path / "mask.onnx", True)
    assert s["parameter_memory"]["state"] == want["state"] and s["parameter_memory"]["positions"] == want["positions"]


def test_resume_keeps_the_compact_state(tmp_path):
    """A sparse run killed at the first step of epoch 2 and resumed from the checkpoint of epoch 1
    equals the uninterrupted run bit for bit (deterministic mode): the compact momentum was saved
    and restored at the kept positions, and the pruned entries are still exactly zero."""
    runs = {}
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        tiny_cnn(str(d / "dense.onnx"))
        assert prune_unstructured(d / "dense.onnx", d / "tiny.onnx", 0.9).returncode == 0
        runs[name] = (d, config(d, sparse=True, deterministic=True, final_polish_epochs=0,
                                optimizer={"type": "sgd", "momentum": 0.9, "weight_decay": 5e-3}))
    (a, ca), (b, cb) = runs["a"], runs["b"]
    ok(dist_train("--config", ca, ranks=2))
    p = dist_train("--config", cb, ranks=2, env={"HPCNN_TEST_FAULT": "1:throw:8"})
    assert p.returncode != 0 and not (b / "trained.onnx").exists()
    s = ok(dist_train("--config", cb, "--resume", b / "ckpt", ranks=2))
    assert s["parameter_memory"]["state"] == closed_form(b / "tiny.onnx", True)["state"]
    wa, wb, w0 = weights(a / "trained.onnx"), weights(b / "trained.onnx"), weights(b / "tiny.onnx")
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)
    for k in ("c1.w", "c2.w", "fc.w"):
        assert np.all(wb[k][w0[k] == 0] == 0), k
