"""dist-train on 3-D volumes with regression targets (issue 42: the CosmoFlow workload): a tiny
CosmoFlow-like network on int16 count volumes [N, 4, 8, 8, 8] with float targets [N, 4], trained
single-process and under mpirun. Checks that the loss falls, that 2 ranks x batch 4 equal 1 rank x
batch 8 (the same global batch), that --evaluate's mse / mae / mae_per_target equal NumPy on
onnxruntime's predictions of the same normalised volumes, the 3-D augmentations against NumPy's
flip/transpose, and every bad input the issue lists: a clear error, a non-zero exit, nothing written."""
import json
import os
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import hpcnn_test as H
from test_dist_train import dist_train, ok, weights  # the runner of every dist-train test

MEAN = [0.86] * 4  # log1p mean and spread of volumes() below
STD = [0.54] * 4


def cosmo_tiny(path, size=8, k=4, seed=0, batchnorm=False):
    """Conv3D(8, k 3, pads 1)-LeakyRelu(0.3)-MaxPool3D(2)-Flatten-Gemm(k)-Tanh-Mul(1.2): CosmoFlow's
    pattern at 8^3 and 4 channels; with `batchnorm`, a BatchNormalization on the 5-D conv output
    (running statistics far from the data's: mean 0.5, var 4)."""
    rng = np.random.default_rng(seed)
    half = size // 2
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("c1.w", (rng.standard_normal((8, 4, 3, 3, 3)) * np.sqrt(2 / 108)).astype(np.float32)),
        ("c1.b", np.zeros(8, np.float32)),
        ("fc.w", (rng.standard_normal((k, 8 * half ** 3)) * 0.1 * np.sqrt(1 / (8 * half ** 3))).astype(np.float32)),
        ("fc.b", np.zeros(k, np.float32)),
        ("scale", np.array(1.2, np.float32))]]
    nodes = [helper.make_node("Conv", ["x", "c1.w", "c1.b"], ["c1"], pads=[1] * 6, kernel_shape=[3, 3, 3])]
    if batchnorm:
        inits += [numpy_helper.from_array(np.full(8, v, np.float32), f"bn.{n}")
                  for n, v in (("scale", 1.0), ("bias", 0.0), ("mean", 0.5), ("var", 4.0))]
        nodes.append(helper.make_node("BatchNormalization", ["c1", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["b1"], name="bn1"))
    nodes += [helper.make_node("LeakyRelu", ["b1" if batchnorm else "c1"], ["r1"], alpha=0.3),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
             helper.make_node("Flatten", ["p1"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["g"], transB=1),
             helper.make_node("Tanh", ["g"], ["t"]),
             helper.make_node("Mul", ["t", "scale"], ["y"])]
    g = helper.make_graph(nodes, "cosmo_tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, size, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", k])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def volumes(n, seed, size=8):
    """Poisson counts whose rate sets the targets: a learnable regression (targets in [-1, 1])."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
    rate = np.exp(0.5 + 0.5 * t[:, :, None, None, None])
    v = rng.poisson(np.broadcast_to(rate, (n, 4, size, size, size))).astype(np.int16)
    return v, t


def data(tmp, n=64, n_test=16):
    v, t = volumes(n, 1)
    vt, tt = volumes(n_test, 2)
    for name, a in (("train_v", v), ("train_t", t), ("test_v", vt), ("test_t", tt)):
        np.save(tmp / f"{name}.npy", a)
    return {"train_images": str(tmp / "train_v.npy"), "train_labels": str(tmp / "train_t.npy"),
            "test_images": str(tmp / "test_v.npy"), "test_labels": str(tmp / "test_t.npy")}


def config(tmp, **over):
    c = {"model": str(tmp / "cosmo.onnx"), "output": str(tmp / "trained.onnx"), "metrics": str(tmp / "metrics.jsonl"),
         "task": "regression", "data": data(tmp),
         "augmentation": {"log1p": True, "random_flips_3d": True, "random_axis_permutation": True, "mean": MEAN, "std": STD},
         "epochs": 3, "batch_size": 8, "eval_batch_size": 16,
         "optimizer": {"type": "sgd", "momentum": 0.9},
         "lr": {"base": 0.002, "base_batch": 8, "warmup_epochs": 0.5, "decay": "cosine"},
         "threads": 1, "seed": 5}
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(c.get(k), dict):
            c[k] = {**c[k], **v}
        else:
            c[k] = v
    p = tmp / "config.json"
    p.write_text(json.dumps(c))
    if not os.path.exists(c["model"]):
        cosmo_tiny(c["model"])
    return p


def normalised(v):
    x = np.log1p(v.astype(np.float32))
    return ((x - np.float32(MEAN)[None, :, None, None, None]) / np.float32(STD)[None, :, None, None, None]).astype(np.float32)


def test_regression_trains_and_evaluate_matches_numpy(tmp_path):
    s = ok(dist_train("--config", config(tmp_path)))
    assert s["task"] == "regression" and s["steps"] == 3 * 8
    # The allocator the build linked (tcmalloc where libgoogle-perftools-dev is installed) is the
    # one the ranks run on.
    assert s["allocator"].startswith(os.environ["HPCNN_EXPECT_ALLOCATOR"]), s["allocator"]
    lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    for k in ("train_loss", "train_mae", "test_mse", "test_mae", "test_mae_per_target"):
        assert k in lines[0], lines[0]
    assert "train_accuracy" not in lines[0] and "test_accuracy" not in lines[0]
    assert lines[-1]["train_loss"] < 0.8 * lines[0]["train_loss"], [l["train_loss"] for l in lines]
    # --evaluate: NumPy's mse and mae on onnxruntime's predictions of the log1p-normalised volumes.
    e = ok(dist_train("--config", config(tmp_path), "--evaluate", tmp_path / "trained.onnx"))
    v, t = np.load(tmp_path / "test_v.npy"), np.load(tmp_path / "test_t.npy")
    pred = ort.InferenceSession(str(tmp_path / "trained.onnx")).run(None, {"x": normalised(v)})[0]
    err = pred.astype(np.float64) - t
    assert e["samples"] == 16 and e["split"] == "test"
    assert e["mse"] == pytest.approx(np.mean(err ** 2), rel=1e-5)
    assert e["mae"] == pytest.approx(np.mean(np.abs(err)), rel=1e-5)
    np.testing.assert_allclose(e["mae_per_target"], np.abs(err).mean(axis=0), rtol=1e-5)
    assert "test_accuracy" not in e and "top5" not in json.dumps(e)
    # The summary's test figures are the last epoch's, as --evaluate computes them.
    assert s["test_mae"] == pytest.approx(e["mae"], rel=1e-6)


def test_two_ranks_equal_one_rank_on_the_same_global_batch(tmp_path):
    """2 ranks x batch 4 and 1 rank x batch 8 take the same samples with the same augmentation
    draws at every step (per-sample seeds), so the weights after 2 epochs agree to float rounding
    (the gradient sums differ only in summation order)."""
    runs = {}
    for ranks, batch in ((1, 8), (2, 4)):
        d = tmp_path / f"r{ranks}"
        d.mkdir()
        ok(dist_train("--config", config(d, epochs=2, batch_size=batch, deterministic=True), ranks=ranks if ranks > 1 else 0))
        runs[ranks] = weights(d / "trained.onnx")
    start = weights(cosmo_tiny(tmp_path / "start.onnx"))
    for k in runs[1]:
        np.testing.assert_allclose(runs[2][k], runs[1][k], rtol=1e-5, atol=1e-5, err_msg=k)
    assert not np.allclose(runs[1]["c1.w"], start["c1.w"])  # training did move the weights


def test_compressed_volumes_and_a_validation_split(tmp_path):
    """Volumes and targets compressed by huffgpu-encode train to the same weights as the raw files
    (decoded when loaded), and a validation split held out of them reports validation_mse/mae."""
    runs = {}
    for name in ("raw", "huf"):
        d = tmp_path / name
        d.mkdir()
        files = data(d)
        if name == "huf":
            for key in ("train_images", "train_labels"):
                H.run("huffgpu-encode", "-T", "1", files[key])
                files[key] += ".huf"
        files["validation_samples"] = 16
        s = ok(dist_train("--config", config(d, data=files, epochs=1, deterministic=True)))
        assert s["validation_mae"] > 0 and len(s["validation_mae_per_target"]) == 4 and "validation_accuracy" not in s
        runs[name] = weights(d / "trained.onnx")
    for k in runs["raw"]:
        np.testing.assert_array_equal(runs["huf"][k], runs["raw"][k], err_msg=k)
    raw, huf = tmp_path / "huf" / "train_v.npy", tmp_path / "huf" / "train_v.npy.huf"
    assert os.path.getsize(huf) < 0.6 * os.path.getsize(raw)  # int16 counts of a few units compress well


def test_bn_polish_on_a_3d_model_with_regression_targets(tmp_path):
    """bn-polish re-estimates a 5-D BatchNorm's statistics (population moments over N, D, H, W of
    the log1p-normalised training volumes, as onnxruntime computes the BN input) and reports the
    test mse / mae before and after (--test-accuracy's regression counterpart)."""
    cfg = config(tmp_path)
    model = cosmo_tiny(tmp_path / "bn.onnx", batchnorm=True)
    p = subprocess.run([H.tool("bn-polish"), str(model), "--config", str(cfg), "-o", str(tmp_path / "p.onnx"), "--test-accuracy"],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["samples"] == 64 and [l["name"] for l in r["layers"]] == ["bn1"]
    x = normalised(np.load(tmp_path / "train_v.npy"))
    m = onnx.load(tmp_path / "p.onnx")
    m.graph.output.append(helper.make_tensor_value_info("c1", TensorProto.FLOAT, None))
    c1 = ort.InferenceSession(m.SerializeToString()).run(["c1"], {"x": x})[0].astype(np.float64)
    w = weights(tmp_path / "p.onnx")
    np.testing.assert_allclose(w["bn.mean"], c1.mean(axis=(0, 2, 3, 4)), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w["bn.var"], c1.var(axis=(0, 2, 3, 4)), rtol=1e-4, atol=1e-6)
    v, t = np.load(tmp_path / "test_v.npy"), np.load(tmp_path / "test_t.npy")
    for name, which in ((model, "before"), (tmp_path / "p.onnx", "after")):
        err = ort.InferenceSession(str(name)).run(None, {"x": normalised(v)})[0].astype(np.float64) - t
        assert r[f"test_mae_{which}"] == pytest.approx(np.abs(err).mean(), rel=1e-5)
        assert r[f"test_mse_{which}"] == pytest.approx((err ** 2).mean(), rel=1e-5)
        np.testing.assert_allclose(r[f"test_mae_per_target_{which}"], np.abs(err).mean(axis=0), rtol=1e-5)
    assert "test_accuracy_before" not in r


def bad(tmp_path, expect, code=None, **over):
    """dist-train (and --evaluate unless _train_only) refuse the configuration with `expect` in the
    message and write nothing."""
    train_only = over.pop("_train_only", False)
    cfg = config(tmp_path, **over)
    runs = [["--config", cfg]] + ([] if train_only else [["--config", cfg, "--evaluate", tmp_path / "cosmo.onnx"]])
    for args in runs:
        p = dist_train(*args)
        assert p.returncode != 0 and expect in p.stderr, (args, p.returncode, p.stderr[-2000:])
        if code is not None:
            assert p.returncode == code, p.stderr[-2000:]
        assert "Traceback" not in p.stderr and "terminate called" not in p.stderr
        assert not (tmp_path / "trained.onnx").exists() and not (tmp_path / "metrics.jsonl").exists()


def both_splits(tmp, **files):
    d = data(tmp)
    for split in ("train", "test"):
        for kind, path in files.items():
            d[f"{split}_{kind}"] = str(path)
    return d


def test_volume_shape_disagrees_with_the_model(tmp_path):
    v, t = volumes(16, 3, size=16)
    np.save(tmp_path / "big.npy", v)
    np.save(tmp_path / "t.npy", t)
    bad(tmp_path, f"the volumes of {tmp_path / 'big.npy'} are [4, 16, 16, 16] (channels, depth, height, width)", code=2,
        data=both_splits(tmp_path, images=tmp_path / "big.npy", labels=tmp_path / "t.npy"))


def test_targets_whose_count_or_width_disagrees(tmp_path):
    np.save(tmp_path / "short.npy", np.zeros((10, 4), np.float32))
    bad(tmp_path, "holds 10 target rows but", data=both_splits(tmp_path, labels=tmp_path / "short.npy"))
    np.save(tmp_path / "narrow.npy", np.zeros((64, 3), np.float32))
    np.save(tmp_path / "narrow_test.npy", np.zeros((16, 3), np.float32))
    d = data(tmp_path)
    d["train_labels"], d["test_labels"] = str(tmp_path / "narrow.npy"), str(tmp_path / "narrow_test.npy")
    bad(tmp_path, "predicts 4 values per sample ('y'); data.train_labels", data=d, _train_only=True)
    cfg = config(tmp_path, data=d)
    p = dist_train("--config", cfg, "--evaluate", tmp_path / "cosmo.onnx")
    assert p.returncode != 0 and "predicts 4 values per sample ('y')" in p.stderr, p.stderr[-2000:]


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_nan_or_inf_in_targets(tmp_path, value):
    t = np.zeros((64, 4), np.float32)
    t[5, 2] = value
    np.save(tmp_path / "t.npy", t)
    d = data(tmp_path)
    d["train_labels"] = str(tmp_path / "t.npy")
    bad(tmp_path, f"{tmp_path / 't.npy'}: target 2 of sample 5 is", data=d, _train_only=True)


def test_int16_file_announced_as_float_and_truncated_npy(tmp_path):
    v, _ = volumes(64, 1)
    raw = (tmp_path / "v.npy")
    np.save(raw, v)
    b = raw.read_bytes()
    # The header says <f4 while the data are the int16 counts (half the bytes a float array needs).
    (tmp_path / "as_float.npy").write_bytes(b.replace(b"'<i2'", b"'<f4'", 1))
    d = data(tmp_path)
    d["train_images"] = str(tmp_path / "as_float.npy")
    bad(tmp_path, f"{tmp_path / 'as_float.npy'}: offset", data=d, _train_only=True)
    (tmp_path / "cut.npy").write_bytes(b[:len(b) // 2])
    d["train_images"] = str(tmp_path / "cut.npy")
    bad(tmp_path, "truncated", data=d, _train_only=True)
    (tmp_path / "empty.npy").write_bytes(b"")
    d["train_images"] = str(tmp_path / "empty.npy")
    bad(tmp_path, "empty", data=d, _train_only=True)


def test_regression_config_with_classification_only_keys(tmp_path):
    bad(tmp_path, "label_smoothing is a classification option", code=1, label_smoothing=0.1)
    bad(tmp_path, "stop_at_validation_accuracy is a classification option", code=1, stop_at_validation_accuracy=0.5,
        data={**data(tmp_path), "validation_samples": 8})


def test_task_and_data_must_agree(tmp_path):
    # Float targets with the default task, and integer labels with task regression.
    bad(tmp_path, "holds float regression targets, not class labels", task="classification", _train_only=True)
    np.save(tmp_path / "labels.npy", np.zeros(64, np.int64))
    d = data(tmp_path)
    d["train_labels"] = str(tmp_path / "labels.npy")
    bad(tmp_path, "task regression trains on float targets", data=d, _train_only=True)


def test_2d_augmentation_on_volumes_is_refused(tmp_path):
    bad(tmp_path, "augmentation.horizontal_flip is an augmentation of 2-D images", augmentation={"horizontal_flip": True},
        _train_only=True)
