"""dist-train as a user runs it: single process and under mpirun (2 ranks), on the real
Fashion-MNIST files from Debian's dataset-fashion-mnist, with few steps per epoch so the whole
file runs in a few minutes. Covers the outputs (model, metrics, checkpoint, summary), the
configuration checks, resume (bit-identical in deterministic mode, and with another world
size), the sparse exchange, compressed shards, SIGTERM, and failures on one rank."""
import gzip
import json
import math
import os
import signal
import struct
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hpcnn_test as H

FM = "/usr/share/datasets/fashion-mnist"


@pytest.fixture(autouse=True, scope="module")
def fashion_mnist():
    """scripts/setup.sh installs the dataset: its absence is a failure, not a skip."""
    assert os.path.exists(f"{FM}/train-images-idx3-ubyte.gz"), \
        f"{FM} is missing: scripts/setup.sh installs the Debian package dataset-fashion-mnist"


def tiny_cnn(path, dropout=False, seed=0):
    """Conv(8)-BN-ReLU-MaxPool-Conv(16)-ReLU-MaxPool-Flatten-Gemm(10): small and fast."""
    rng = np.random.default_rng(seed)
    def w(*s):
        fan = int(np.prod(s[1:])) if len(s) > 1 else s[0]
        return (rng.standard_normal(s) * np.sqrt(2.0 / fan)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("c1.w", w(8, 1, 3, 3)), ("bn.scale", np.ones(8, np.float32)), ("bn.bias", np.zeros(8, np.float32)),
        ("bn.mean", np.zeros(8, np.float32)), ("bn.var", np.ones(8, np.float32)),
        ("c2.w", w(16, 8, 3, 3)), ("c2.b", np.zeros(16, np.float32)),
        ("fc.w", w(10, 16 * 7 * 7)), ("fc.b", np.zeros(10, np.float32))]]
    nodes = [helper.make_node("Conv", ["x", "c1.w"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["b1"]),
             helper.make_node("Relu", ["b1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "c2.w", "c2.b"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p2"], ["f"])]
    last = "f"
    if dropout:
        inits.append(numpy_helper.from_array(np.array(0.3, np.float32), "ratio"))
        nodes.append(helper.make_node("Dropout", ["f", "ratio"], ["d"]))
        last = "d"
    nodes.append(helper.make_node("Gemm", [last, "fc.w", "fc.b"], ["logits"], transB=1))
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 28, 28])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def config(tmp, **over):
    c = {
        "model": str(tmp / "tiny.onnx"),
        "output": str(tmp / "trained.onnx"),
        "metrics": str(tmp / "metrics.jsonl"),
        "checkpoint": {"path": str(tmp / "ckpt"), "interval_epochs": 1},
        "data": {"train_images": f"{FM}/train-images-idx3-ubyte.gz", "train_labels": f"{FM}/train-labels-idx1-ubyte.gz",
                 "test_images": f"{FM}/t10k-images-idx3-ubyte.gz", "test_labels": f"{FM}/t10k-labels-idx1-ubyte.gz"},
        "augmentation": {"crop_padding": 2, "horizontal_flip": True, "mean": [0.286], "std": [0.353]},
        "epochs": 2, "batch_size": 32, "max_steps_per_epoch": 8, "eval_batch_size": 500,
        "optimizer": {"type": "sgd", "momentum": 0.9, "weight_decay": 5e-4},
        "lr": {"base": 0.05, "base_batch": 64, "warmup_epochs": 0.5},
        "label_smoothing": 0.1, "final_polish_epochs": 1, "threads": 1, "seed": 3,
    }
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(c.get(k), dict):
            c[k].update(v)
        else:
            c[k] = v
    p = tmp / "config.json"
    p.write_text(json.dumps(c))
    if not os.path.exists(c["model"]):
        tiny_cnn(c["model"])
    return p


def dist_train(*args, ranks=0, env=None, timeout=600):
    cmd = [H.tool("dist-train"), *map(str, args)]
    if ranks:
        cmd = [*H.launch(ranks), *cmd]
    e = dict(os.environ, OMP_NUM_THREADS="1")
    e.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)


def ok(p):
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def weights(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def test_single_process_run_outputs(tmp_path):
    cfg = config(tmp_path)
    s = ok(dist_train("--config", cfg))
    assert s["world_size"] == 1 and s["epochs"] == 2 and s["steps"] == 16
    assert 0.3 < s["test_accuracy"] <= 1.0, s  # 16 steps of a small CNN: far above chance (0.1)
    lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [l["epoch"] for l in lines] == [1, 2]
    assert lines[1]["final_polish"] is True and lines[0]["final_polish"] is False
    for k in ("step", "train_loss", "train_accuracy", "test_accuracy", "images_per_second", "seconds"):
        assert k in lines[0]
    # The trained model is valid ONNX, runs in onnxruntime, and its BatchNorm statistics moved.
    m = onnx.load(tmp_path / "trained.onnx")
    onnx.checker.check_model(m, full_check=True)
    w = weights(tmp_path / "trained.onnx")
    assert not np.allclose(w["bn.mean"], 0)
    # --evaluate of the written model reproduces the summary's test accuracy; onnxruntime agrees on
    # the predictions of a few test images.
    e = ok(dist_train("--config", cfg, "--evaluate", tmp_path / "trained.onnx"))
    assert e["samples"] == 10000 and abs(e["test_accuracy"] - s["test_accuracy"]) < 1e-9
    # The model's costs, counted independently (hpcnn_test), and its file size.
    assert e["parameters"] == H.count_params(m) and e["macs"] == H.count_macs(m)
    assert e["model_bytes"] == os.path.getsize(tmp_path / "trained.onnx") and e["images_per_second"] > 0
    assert (tmp_path / "ckpt").exists()


def test_two_ranks_under_mpirun(tmp_path):
    cfg = config(tmp_path)
    p = dist_train("--config", cfg, ranks=2)
    s = ok(p)
    assert s["world_size"] == 2 and s["global_batch"] == 64
    assert len(p.stdout.strip().splitlines()) == 1  # only rank 0 prints the summary
    assert "rank 1" not in p.stderr  # other ranks log only warnings and errors
    assert "epoch 2/2" in p.stderr


def test_print_config_and_bad_configs(tmp_path):
    cfg = config(tmp_path)
    p = dist_train("--config", cfg, "--epochs", "7", "--set", "optimizer.type=lars", "--print-config")
    merged = json.loads(p.stdout)
    assert merged["epochs"] == 7 and merged["optimizer"]["type"] == "lars" and merged["lr"]["decay"] == "cosine"
    # A named flag wins over a --set of its key, whatever their order.
    p = dist_train("--config", cfg, "-o", "x.onnx", "--set", 'output="y.onnx"', "--set", "epochs=3", "--epochs", "5", "--print-config")
    merged = json.loads(p.stdout)
    assert merged["output"] == "x.onnx" and merged["epochs"] == 5
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": "m.onnx", "optimiser": {}}))
    p = dist_train("--config", bad)
    assert p.returncode == 1 and "unknown configuration key 'optimiser'" in p.stderr and "optimizer" in p.stderr
    bad.write_text(json.dumps({"model": "m.onnx", "lr": {"base": "fast"}}))
    p = dist_train("--config", bad)
    assert p.returncode == 1 and "'lr.base'" in p.stderr
    bad.write_text("{ not json")
    assert dist_train("--config", bad).returncode == 1
    p = dist_train("--config", cfg, "--set", "lr.decay=sideways")
    assert p.returncode == 1 and "lr.decay" in p.stderr
    # A missing data file fails before training, naming the file; no output model.
    p = dist_train("--config", cfg, "--set", 'data.train_images="/nonexistent/train.idx"', ranks=2)
    assert p.returncode != 0 and "/nonexistent/train.idx" in p.stderr
    assert not (tmp_path / "trained.onnx").exists()


def test_resized_crop_and_erasing(tmp_path):
    """Strong augmentation trains (it changes the weights against the plain crop, deterministically)
    and bad augmentation settings are refused before any work, naming the key."""
    aug = {"crop_padding": 0, "resized_crop_scale": [0.35, 1.0], "resized_crop_ratio": [0.75, 1.3333],
           "erasing_probability": 0.5, "erasing_scale": [0.02, 0.2]}
    runs = {}
    for name, a in (("strong", aug), ("again", aug), ("plain", {})):
        d = tmp_path / name
        d.mkdir()
        cfg = config(d, augmentation=dict(a), final_polish_epochs=0, epochs=1, output=str(d / "trained.onnx"))
        ok(dist_train("--config", cfg))
        runs[name] = weights(d / "trained.onnx")
    assert all(np.array_equal(runs["strong"][k], runs["again"][k]) for k in runs["strong"])
    assert any(not np.array_equal(runs["strong"][k], runs["plain"][k]) for k in runs["strong"])
    cfg = config(tmp_path)
    for key, value, says in (("augmentation.resized_crop_scale", "[0.5, 1.0]", "exclude each other"),  # with crop_padding 2
                             ("augmentation.resized_crop_scale", "[0.5]", "augmentation.resized_crop_scale must be [min, max]"),
                             ("augmentation.erasing_probability", "1.5", "erasing probability"),
                             ("augmentation.erasing_scale", "[0.3, 0.1]", "erasing scale")):
        over = ["--set", f"{key}={value}"]
        if key == "augmentation.erasing_scale":
            over += ["--set", "augmentation.erasing_probability=0.5"]
        p = dist_train("--config", cfg, *over, "--print-config")
        assert p.returncode == 1 and says in p.stderr, (key, p.stderr)


def reference_run_and_twin(tmp_path):
    """Folders a and b with the same tiny model and deterministic configuration; a trained
    uninterrupted (2 ranks). Returns a, b and b's configuration."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    tiny_cnn(str(a / "tiny.onnx"), dropout=True)
    tiny_cnn(str(b / "tiny.onnx"), dropout=True)
    ok(dist_train("--config", config(a, deterministic=True), ranks=2))
    return a, b, config(b, deterministic=True)


def test_resume_reproduces_uninterrupted_run(tmp_path):
    a, b, cb = reference_run_and_twin(tmp_path)
    # The same run, killed (injected fault) at the first step of epoch 2, resumed from the
    # checkpoint written after epoch 1.
    p = dist_train("--config", cb, ranks=2, env={"HPCNN_TEST_FAULT": "1:throw:8"})
    assert p.returncode != 0 and not (b / "trained.onnx").exists()
    ok(dist_train("--config", cb, "--resume", b / "ckpt", ranks=2))
    wa, wb = weights(a / "trained.onnx"), weights(b / "trained.onnx")
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)
    # Resuming with another number of ranks works too.
    s = ok(dist_train("--config", cb, "--resume", b / "ckpt", "--epochs", "3", "--set", "final_polish_epochs=0", "-f"))
    assert s["world_size"] == 1 and s["steps"] == 16 + 8  # epoch 3 alone: 8 more steps

def test_resume_auto_starts_fresh_then_continues(tmp_path):
    """--resume auto: the same command line starts a run (no checkpoint yet) and, after a kill,
    continues it from checkpoint.path; the result equals an uninterrupted run's."""
    a, b, cb = reference_run_and_twin(tmp_path)
    p = dist_train("--config", cb, "--resume", "auto", ranks=2, env={"HPCNN_TEST_FAULT": "1:throw:8"})
    assert p.returncode != 0 and "starting fresh" in p.stderr, p.stderr
    assert (b / "ckpt").exists() and not (b / "trained.onnx").exists()
    p = dist_train("--config", cb, "--resume", "auto", ranks=2)
    assert p.returncode == 0, p.stderr
    assert "continuing from the checkpoint" in p.stderr and "resuming from" in p.stderr and "at epoch 2" in p.stderr
    wa, wb = weights(a / "trained.onnx"), weights(b / "trained.onnx")
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)
    # Without a checkpoint path there is nothing to look for: a usage error, nothing written.
    (b / "trained.onnx").unlink()
    p = dist_train("--config", cb, "--resume", "auto", "--set", 'checkpoint.path=""')
    assert p.returncode == 1 and "--resume auto needs a checkpoint path" in p.stderr, p.stderr
    assert not (b / "trained.onnx").exists()


def test_batchnorm_statistics_follow_the_global_batch(tmp_path):
    """2 ranks x batch 32 and 1 rank x batch 64 see the same samples at every step (epoch_plan.h);
    with the exact cross-rank reduction of the BatchNorm moments their running statistics agree to
    float rounding. (Averaging the ranks' own running variances, as before, misses the spread of
    the ranks' batch means: about 2e-5 of the variance here, 20x the tolerance.) A learning rate
    of 1e-9 keeps the weights, hence the BatchNorm inputs, the same in both runs."""
    runs = {}
    for ranks, batch in ((1, 64), (2, 32)):
        d = tmp_path / f"r{ranks}"
        d.mkdir()
        cfg = config(d, epochs=1, batch_size=batch, final_polish_epochs=0, deterministic=True,
                     data=small_idx(d, 1024), lr={"base": 1e-9, "warmup_epochs": 0},
                     augmentation={"crop_padding": 0, "horizontal_flip": False})
        ok(dist_train("--config", cfg, ranks=ranks if ranks > 1 else 0))
        runs[ranks] = weights(d / "trained.onnx")
    for k in ("bn.mean", "bn.var"):
        np.testing.assert_allclose(runs[2][k], runs[1][k], rtol=1e-6, atol=1e-9, err_msg=k)
    assert np.all(np.abs(runs[1]["bn.var"] - 1) > 1e-3)  # the statistics did move from their start


def test_sparse_exchange_keeps_zeros(tmp_path):
    cfg = config(tmp_path, sparse=True, epochs=1, final_polish_epochs=0)
    m = onnx.load(tmp_path / "tiny.onnx")
    rng = np.random.default_rng(5)
    for t in m.graph.initializer:
        if len(t.dims) >= 2:
            a = numpy_helper.to_array(t).copy()
            a[rng.random(a.shape) < 0.9] = 0
            t.CopyFrom(numpy_helper.from_array(a, t.name))
    onnx.save(m, tmp_path / "tiny.onnx")
    s = ok(dist_train("--config", cfg, ranks=2))
    assert s["gradient_exchange"] == "sparse"
    assert s["bytes_exchanged_per_step"] <= 0.15 * s["dense_bytes_per_step"]
    before, after = weights(tmp_path / "tiny.onnx"), weights(tmp_path / "trained.onnx")
    for k, w0 in before.items():
        if w0.ndim >= 2:
            assert np.all(after[k][w0 == 0] == 0), k
            assert np.any(after[k][w0 != 0] != w0[w0 != 0]), k


def test_compressed_shards_and_accumulation(tmp_path):
    for f in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        raw = tmp_path / f[:-3]
        with open(raw, "wb") as out:
            subprocess.run(["gzip", "-dc", f"{FM}/{f}"], stdout=out, check=True)
        H.run("huffgpu-encode", "-q", raw)
    cfg = config(tmp_path, epochs=1, final_polish_epochs=0, accumulation_steps=2,
                 data={"train_images": str(tmp_path / "train-images-idx3-ubyte.huf"),
                       "train_labels": str(tmp_path / "train-labels-idx1-ubyte.huf")})
    s = ok(dist_train("--config", cfg))
    assert s["global_batch"] == 64 and s["steps"] == 8


@pytest.mark.parametrize("kind", ["nan", "throw", "kill"])
def test_failure_on_one_rank_stops_every_rank(tmp_path, kind):
    cfg = config(tmp_path)
    t0 = time.time()
    p = dist_train("--config", cfg, ranks=2, env={"HPCNN_TEST_FAULT": f"1:{kind}:3"}, timeout=120)
    assert p.returncode != 0
    assert time.time() - t0 < 100
    if kind != "kill":
        assert "rank 1" in p.stderr, p.stderr
    if kind == "nan":
        assert "loss is nan" in p.stderr
    assert not (tmp_path / "trained.onnx").exists()


def wait_for_stderr_line(proc, marker, timeout=120):
    """Reads proc's stderr until a line containing `marker` (the readiness sign); returns the
    lines read. The rest of stderr keeps draining in the background."""
    lines, found = [], threading.Event()

    def pump():
        for line in proc.stderr:
            lines.append(line)
            if marker in line:
                found.set()
    threading.Thread(target=pump, daemon=True).start()
    assert found.wait(timeout), f"no line with {marker!r} within {timeout} s: {''.join(lines)}"
    return lines


def wait_for_stderr_line_in(proc, lines, marker, timeout=120):
    """After wait_for_stderr_line: waits until the still-growing `lines` hold `marker`."""
    t0 = time.time()
    while not any(marker in l for l in list(lines)):
        assert time.time() - t0 < timeout and proc.poll() is None, f"no line with {marker!r}: {''.join(lines)}"
        time.sleep(0.005)


def test_sigterm_checkpoints_and_exits(tmp_path):
    cfg = config(tmp_path, epochs=50, max_steps_per_epoch=0)
    proc = subprocess.Popen([H.tool("dist-train"), "--config", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    lines = wait_for_stderr_line(proc, "steps per epoch")  # logged right before the first step
    proc.send_signal(signal.SIGTERM)
    out = proc.stdout.read()
    proc.wait(timeout=120)
    assert proc.returncode == 143, "".join(lines)
    s = json.loads(out)
    assert s["stopped"] is True and s["epoch"] == 1 and s["step"] >= 1
    # The clean-up path ran: a checkpoint at the step where the signal was honoured, no model,
    # no temporary file; the checkpoint resumes.
    assert read_checkpoint_meta(tmp_path / "ckpt")["global_step"] == s["step"]
    assert any("stop requested (SIGTERM)" in l for l in lines)
    assert not (tmp_path / "trained.onnx").exists()
    assert not [f for f in os.listdir(tmp_path) if ".tmp." in f]


def test_second_signal_ends_at_once_and_cleans_up(tmp_path):
    """The first SIGTERM asks for a checkpoint at the next step (and says so at once); a second one
    ends the process at once (default action), after the tool frame's handler removed every
    temporary file. One step of 64 x 256 images keeps the process in its first step meanwhile."""
    cfg = config(tmp_path, epochs=50, max_steps_per_epoch=0, batch_size=256, accumulation_steps=64)
    proc = subprocess.Popen([H.tool("dist-train"), "--config", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    lines = wait_for_stderr_line(proc, "steps per epoch")
    proc.send_signal(signal.SIGTERM)  # two signals sent back to back would merge into one
    wait_for_stderr_line_in(proc, lines, "a second signal stops at once")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGTERM, "".join(lines)
    assert not (tmp_path / "trained.onnx").exists()
    assert not [f for f in os.listdir(tmp_path) if ".tmp." in f]


def read_checkpoint_meta(path, with_model=False):
    """The JSON header of a dist-train checkpoint (train/checkpoint.h), and its model."""
    data = Path(path).read_bytes()
    assert data[:8] == b"HPCNNCKP"
    n = struct.unpack("<Q", data[12:20])[0]
    meta = json.loads(data[20:20 + n])
    if not with_model:
        return meta
    blob = next(b for b in meta["blobs"] if b["name"] == "model")
    start = 20 + n + blob["offset"]
    return meta, onnx.load_from_string(data[start:start + blob["size"]])


def small_idx(tmp, n):
    """The first n Fashion-MNIST training images and labels as raw IDX files."""
    with gzip.open(f"{FM}/train-images-idx3-ubyte.gz") as f:
        images = f.read(16 + n * 784)
    with gzip.open(f"{FM}/train-labels-idx1-ubyte.gz") as f:
        labels = f.read(8 + n)
    (tmp / "img.idx").write_bytes(images[:4] + struct.pack(">I", n) + images[8:])
    (tmp / "lbl.idx").write_bytes(labels[:4] + struct.pack(">I", n) + labels[8:])
    return {"train_images": str(tmp / "img.idx"), "train_labels": str(tmp / "lbl.idx"), "test_images": "", "test_labels": ""}


def cosine_lr(x, epochs, peak, warmup):
    """The closed form of train/schedule.h at x epochs done, final lr 0."""
    t = min(max((x - warmup) / (epochs - warmup), 0.0), 1.0)
    return peak * (1 + math.cos(math.pi * t)) / 2


@pytest.mark.parametrize("how", ["batch", "ranks"])
def test_resume_with_another_batch_or_world_size_continues_the_schedule(tmp_path, how):
    """Checkpoint after 2 of 4 epochs at batch 2, resume with batch 4 (or 2 ranks x batch 2): the
    learning rate continues from the fraction of training done, and the weights keep changing."""
    cfg = config(tmp_path, data=small_idx(tmp_path, 64), epochs=4, batch_size=2, max_steps_per_epoch=0,
                 final_polish_epochs=0, lr={"base": 0.05, "base_batch": 64, "warmup_epochs": 0.5})
    p = dist_train("--config", cfg, env={"HPCNN_TEST_FAULT": "0:throw:64"})  # dies at the first step of epoch 3
    assert p.returncode != 0 and "injected fault" in p.stderr
    meta, at_ckpt = read_checkpoint_meta(tmp_path / "ckpt", with_model=True)
    assert meta["epoch"] == 2 and meta["global_step"] == 64 and meta["batch_size"] == 2
    if how == "batch":
        s = ok(dist_train("--config", cfg, "--resume", tmp_path / "ckpt", "--batch-size", "4"))
    else:
        s = ok(dist_train("--config", cfg, "--resume", tmp_path / "ckpt", ranks=2))
    assert s["global_batch"] == 4 and s["steps"] == 64 + 2 * 16
    lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [l["epoch"] for l in lines] == [1, 2, 3, 4]
    peak = 0.05 * 4 / 64
    for l in lines[2:]:  # the lr of each epoch's last step (16 steps per epoch now)
        assert l["lr"] == pytest.approx(cosine_lr(l["epoch"] - 1 + 15 / 16, 4, peak, 0.5), rel=1e-9)
    assert lines[2]["lr"] > 0.15 * peak  # before the fix: 0 (the schedule thought training had ended)
    before = {t.name: numpy_helper.to_array(t) for t in at_ckpt.graph.initializer}
    after = weights(tmp_path / "trained.onnx")
    assert all(not np.array_equal(before[k], after[k]) for k in ("c1.w", "c2.w", "fc.w"))


def test_resume_with_nothing_left_to_train(tmp_path):
    cfg = config(tmp_path, data=small_idx(tmp_path, 64), epochs=2, final_polish_epochs=0, max_steps_per_epoch=2)
    ok(dist_train("--config", cfg))
    (tmp_path / "trained.onnx").unlink()
    for epochs in ("2", "1"):
        p = dist_train("--config", cfg, "--resume", tmp_path / "ckpt", "--epochs", epochs)
        assert p.returncode == 1, p.stderr
        assert f"is at epoch 2; --epochs {epochs} leaves nothing to train" in p.stderr
        assert not (tmp_path / "trained.onnx").exists()


def test_resuming_a_finished_run_replaces_its_own_output(tmp_path):
    """A finished run continued with more epochs (--resume CK --epochs N+1) replaces the output that
    run wrote (the checkpoint records it) without -f; another existing file still needs -f."""
    cfg = config(tmp_path, data=small_idx(tmp_path, 64), epochs=2, final_polish_epochs=0, max_steps_per_epoch=2)
    ok(dist_train("--config", cfg))
    meta = read_checkpoint_meta(tmp_path / "ckpt")
    assert meta["output"] == str(tmp_path / "trained.onnx") and meta["model_file"] == str(tmp_path / "tiny.onnx")
    before = weights(tmp_path / "trained.onnx")
    s = ok(dist_train("--config", cfg, "--resume", tmp_path / "ckpt", "--epochs", "3"))
    assert s["steps"] == 6
    after = weights(tmp_path / "trained.onnx")
    assert not np.array_equal(before["fc.w"], after["fc.w"])
    # Another output that exists: the usual rule (-f), the file untouched.
    (tmp_path / "other.onnx").write_bytes(b"keep")
    p = dist_train("--config", cfg, "--resume", tmp_path / "ckpt", "--epochs", "4", "-o", tmp_path / "other.onnx")
    assert p.returncode == 3 and "already exists (use -f to overwrite)" in p.stderr, p.stderr
    assert (tmp_path / "other.onnx").read_bytes() == b"keep"


@pytest.mark.parametrize("how", ["model", "config"])
def test_resume_with_another_model_is_refused(tmp_path, how):
    """A checkpoint belongs to its model (graph and parameter shapes): resuming it with a configuration
    (or --model) naming another model fails before training, naming both models and the difference,
    and writes nothing; --resume auto after the configuration changed likewise."""
    cfg = config(tmp_path, data=small_idx(tmp_path, 64), epochs=2, final_polish_epochs=0, max_steps_per_epoch=2)
    p = dist_train("--config", cfg, env={"HPCNN_TEST_FAULT": "0:throw:2"})  # dies in epoch 2, checkpoint after epoch 1
    assert p.returncode != 0 and (tmp_path / "ckpt").exists()
    other = tmp_path / "other.onnx"
    tiny_cnn(str(other), dropout=True)  # same weights' shapes, one node more
    args = ["--model", other] if how == "model" else []
    if how == "config":
        cfg = config(tmp_path, data=small_idx(tmp_path, 64), epochs=2, final_polish_epochs=0, max_steps_per_epoch=2,
                     model=str(other))
    for resume in (tmp_path / "ckpt", "auto"):
        p = dist_train("--config", cfg, "--resume", resume, *args)
        assert p.returncode == 1, p.stderr
        assert f"checkpoint {tmp_path / 'ckpt'} belongs to the model '{tmp_path / 'tiny.onnx'}', not to '{other}'" in p.stderr, p.stderr
        assert "initializer 'ratio' is in the second only" in p.stderr, p.stderr
        assert not (tmp_path / "trained.onnx").exists()
    # Another shape of a parameter (a first conv of 4 filters instead of 8) is named too.
    m = onnx.load(str(tmp_path / "tiny.onnx"))
    for t in m.graph.initializer:
        a = numpy_helper.to_array(t)
        if t.name in ("c1.w", "bn.scale", "bn.bias", "bn.mean", "bn.var"):
            t.CopyFrom(numpy_helper.from_array(a[:4].copy(), t.name))
        if t.name == "c2.w":
            t.CopyFrom(numpy_helper.from_array(a[:, :4].copy(), t.name))
    onnx.save(m, str(other))
    p = dist_train("--config", cfg, "--resume", tmp_path / "ckpt", *args)
    assert p.returncode == 1 and "initializer 'c1.w' has shape [8, 1, 3, 3] in the first, [4, 1, 3, 3] in the second" in p.stderr, \
        p.stderr


def test_label_out_of_range_names_its_place_in_the_labels_file(tmp_path):
    """A label outside the model's classes names the sample's index in the labels file (not its
    place in a shuffled batch), in training and in --evaluate, with and without a validation split."""
    d = small_idx(tmp_path, 64)
    raw = bytearray((tmp_path / "lbl.idx").read_bytes())
    raw[8 + 37] = 12
    (tmp_path / "lbl.idx").write_bytes(bytes(raw))
    cfg = config(tmp_path, data=d, epochs=1, final_polish_epochs=0, max_steps_per_epoch=0, batch_size=8)
    p = dist_train("--config", cfg)
    assert p.returncode == 2, p.stderr
    assert "label 12 of sample 37 of " in p.stderr and "is outside [0, 10): the model has 10 outputs" in p.stderr, p.stderr
    assert not (tmp_path / "trained.onnx").exists()
    p = dist_train("--config", cfg, "--set", "data.validation_samples=20", ranks=2)
    assert p.returncode == 2 and "label 12 of sample 37 of " in p.stderr, p.stderr
    d2 = dict(d, test_images=d["train_images"], test_labels=d["train_labels"])
    cfg = config(tmp_path, data=d2)
    tiny_cnn(str(tmp_path / "m.onnx"))
    p = dist_train("--config", cfg, "--evaluate", tmp_path / "m.onnx")
    assert p.returncode == 2 and "label 12 of sample 37 of " in p.stderr, p.stderr


def test_data_that_do_not_fit_the_model_fail_at_load(tmp_path):
    """Images whose shape is not the model's input (3x32x32 for a 1x28x28 model) are refused when
    the data are opened, before any batch runs, by every tool that runs the model on data (exit 2,
    naming the model, its input and both shapes, nothing written)."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "img.npy", rng.integers(0, 256, (64, 3, 32, 32), dtype=np.uint8))
    np.save(tmp_path / "lbl.npy", rng.integers(0, 10, 64).astype(np.int64))
    d = {"train_images": str(tmp_path / "img.npy"), "train_labels": str(tmp_path / "lbl.npy"),
         "test_images": str(tmp_path / "img.npy"), "test_labels": str(tmp_path / "lbl.npy")}
    cfg = config(tmp_path, data=d, epochs=1, final_polish_epochs=0)
    model = tmp_path / "tiny.onnx"
    want = f"the model {model} takes 'x' of shape [N, 1, 28, 28]; the images of {tmp_path / 'img.npy'} are [3, 32, 32]"
    runs = [[H.tool("dist-train"), "--config", cfg],
            [H.tool("dist-train"), "--config", cfg, "--evaluate", model],
            [H.tool("bn-polish"), model, "--config", cfg, "-o", tmp_path / "out.onnx"],
            [H.tool("prune-rate"), model, "--config", cfg, "-o", tmp_path / "out.onnx"],
            [H.tool("sparsify-fcl"), model, "--init", "data", "--config", cfg, "--compression", "2", "-o", tmp_path / "out.onnx"]]
    for cmd in runs:
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=300)
        assert p.returncode == 2 and want in p.stderr, (cmd[0], p.returncode, p.stderr)
        assert not (tmp_path / "out.onnx").exists() and not (tmp_path / "trained.onnx").exists()


def test_batchnorm_statistics_read_through_identity_nodes_are_kept_apart(tmp_path):
    """PyTorch's TorchScript exporter merges equal initializers (a fresh BatchNorm's scale and
    running_var are all ones, bias and running_mean all zeros) and feeds the merged one through
    Identity nodes. The tools give each forwarded value an initializer of its own: dist-train then
    follows the running statistics as buffers (they used to be trained as the scale), and
    bn-polish finds them (it used to fail on a 'running_mean' that is not an initializer)."""
    m = onnx.load(tiny_cnn(str(tmp_path / "plain.onnx")))
    bn = next(n for n in m.graph.node if n.op_type == "BatchNormalization")
    for t in list(m.graph.initializer):
        if t.name in ("bn.mean", "bn.var"):
            m.graph.initializer.remove(t)
    m.graph.node.insert(0, helper.make_node("Identity", ["bn.scale"], ["bn.var"]))
    m.graph.node.insert(0, helper.make_node("Identity", ["bn.bias"], ["bn.mean"]))
    assert list(bn.input)[1:] == ["bn.scale", "bn.bias", "bn.mean", "bn.var"]
    onnx.save(m, tmp_path / "tiny.onnx")
    cfg = config(tmp_path, data=small_idx(tmp_path, 256), epochs=1, final_polish_epochs=0, max_steps_per_epoch=4)
    p = dist_train("--config", cfg)
    s = ok(p)
    assert "16 in 2 running-statistics buffers" in p.stderr, p.stderr  # before: 0 in 0
    w = weights(tmp_path / "trained.onnx")
    assert not any(n.op_type == "Identity" for n in onnx.load(tmp_path / "trained.onnx").graph.node)
    assert not np.array_equal(w["bn.var"], w["bn.scale"]) and not np.allclose(w["bn.var"], 1.0), (w["bn.var"], w["bn.scale"])
    assert s["world_size"] == 1
    p = subprocess.run([H.tool("bn-polish"), str(tmp_path / "tiny.onnx"), "--config", str(cfg), "--samples", "64", "-o",
                        str(tmp_path / "polished.onnx")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)["layers"]) == 1


def test_flatten_written_as_shape_arithmetic_runs(tmp_path):
    """Converters (tf2onnx from Keras) write Flatten on a dynamic batch as Shape -> Slice -> Concat ->
    Reshape: the engine runs that shape arithmetic (Slice of a shape value included) and computes
    what the plain Flatten computes (same loss and accuracy), and trains it."""
    m = onnx.load(tiny_cnn(str(tmp_path / "tiny.onnx")))
    flat = next(n for n in m.graph.node if n.op_type == "Flatten")
    i = list(m.graph.node).index(flat)
    m.graph.initializer.extend([numpy_helper.from_array(np.array([0], np.int64), "s0"),
                                numpy_helper.from_array(np.array([1], np.int64), "s1"),
                                numpy_helper.from_array(np.array([-1], np.int64), "minus1")])
    new = [helper.make_node("Shape", [flat.input[0]], ["shp"]), helper.make_node("Slice", ["shp", "s0", "s1"], ["batch"]),
           helper.make_node("Concat", ["batch", "minus1"], ["target"], axis=0),
           helper.make_node("Reshape", [flat.input[0], "target"], [flat.output[0]])]
    m.graph.node.remove(flat)
    for k, n in enumerate(new):
        m.graph.node.insert(i + k, n)
    onnx.save(m, tmp_path / "arith.onnx")
    d = small_idx(tmp_path, 256)
    cfg = config(tmp_path, data=dict(d, test_images=d["train_images"], test_labels=d["train_labels"]), epochs=1,
                 final_polish_epochs=0, max_steps_per_epoch=4)
    a = ok(dist_train("--config", cfg, "--evaluate", tmp_path / "tiny.onnx"))
    b = ok(dist_train("--config", cfg, "--evaluate", tmp_path / "arith.onnx"))
    assert a["test_accuracy"] == b["test_accuracy"] and a["test_loss"] == pytest.approx(b["test_loss"], rel=1e-6)
    s = ok(dist_train("--config", cfg, "--model", tmp_path / "arith.onnx"))
    assert s["steps"] == 4


def test_short_run_clamps_final_polish(tmp_path):
    cfg = config(tmp_path, data=small_idx(tmp_path, 64), final_polish_epochs=2, max_steps_per_epoch=2)
    p = dist_train("--config", cfg, "--epochs", "1")
    s = ok(p)
    assert s["epochs"] == 1
    assert "final_polish_epochs 2 clamped to 0 (epochs 1)" in p.stderr
    lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [l["final_polish"] for l in lines] == [False]
    p = dist_train("--config", cfg, "--epochs", "3", "--print-config")
    assert json.loads(p.stdout)["final_polish_epochs"] == 2 and "clamped" not in p.stderr


def test_output_folders_are_created_before_any_work(tmp_path):
    out = tmp_path / "runs" / "a"
    cfg = config(tmp_path, data=small_idx(tmp_path, 64), epochs=1, final_polish_epochs=0, max_steps_per_epoch=2,
                 output=str(out / "model" / "trained.onnx"), metrics=str(out / "logs" / "metrics.jsonl"),
                 checkpoint={"path": str(out / "ckpt" / "c.ckpt")})
    ok(dist_train("--config", cfg, ranks=2))
    onnx.checker.check_model(onnx.load(out / "model" / "trained.onnx"))
    assert len((out / "logs" / "metrics.jsonl").read_text().splitlines()) == 1
    assert read_checkpoint_meta(out / "ckpt" / "c.ckpt")["epoch"] == 1
    # A path component that is a file: exit 3 naming it, before training (no metrics written).
    (tmp_path / "file").write_text("x")
    p = dist_train("--config", cfg, "--metrics", tmp_path / "m.jsonl", "-o", tmp_path / "file" / "t.onnx")
    assert p.returncode == 3 and f"'{tmp_path / 'file'}' exists and is not a folder" in p.stderr, p.stderr
    assert not (tmp_path / "m.jsonl").exists()


def test_truncated_corrupt_and_empty_inputs(tmp_path):
    cfg = config(tmp_path, epochs=1, final_polish_epochs=0, max_steps_per_epoch=2)
    ok(dist_train("--config", cfg))
    ckpt = (tmp_path / "ckpt").read_bytes()
    bad = tmp_path / "bad.ckpt"
    for name, data in [("empty", b""), ("truncated", ckpt[: len(ckpt) // 2]), ("header", ckpt[:30]),
                       ("magic", b"XXXXXXXX" + ckpt[8:])]:
        bad.write_bytes(data)
        p = dist_train("--config", cfg, "--resume", bad, "-o", tmp_path / "r.onnx")
        assert p.returncode == 2, (name, p.stderr)
        assert "bad.ckpt" in p.stderr, (name, p.stderr)
        assert not (tmp_path / "r.onnx").exists()
    model = (tmp_path / "tiny.onnx").read_bytes()
    for name, data in [("empty", b""), ("truncated", model[: len(model) // 3])]:
        m = tmp_path / f"{name}.onnx"
        m.write_bytes(data)
        p = dist_train("--config", cfg, "--model", m, "-o", tmp_path / "r.onnx", ranks=2)
        assert p.returncode != 0 and f"{name}.onnx" in p.stderr, (name, p.stderr)
        assert not (tmp_path / "r.onnx").exists()
    images = tmp_path / "images.idx"
    with open(images, "wb") as out:
        subprocess.run(["gzip", "-dc", f"{FM}/t10k-images-idx3-ubyte.gz"], stdout=out, check=True)
    images.write_bytes(images.read_bytes()[:5000])
    p = dist_train("--config", cfg, "--set", f'data.train_images="{images}"',
                   "--set", f'data.train_labels="{FM}/t10k-labels-idx1-ubyte.gz"', "-f")
    assert p.returncode == 2 and "images.idx" in p.stderr, p.stderr
    # The output policy of every tool: an existing output model needs -f (checked before any
    # work: no metrics line is written); the metrics and checkpoint are rewritten as it runs.
    before = (tmp_path / "trained.onnx").stat()
    lines = (tmp_path / "metrics.jsonl").read_text()
    p = dist_train("--config", cfg)
    assert p.returncode == 3 and "already exists (use -f" in p.stderr, p.stderr
    assert (tmp_path / "trained.onnx").stat() == before and (tmp_path / "metrics.jsonl").read_text() == lines
    ok(dist_train("--config", cfg, "-f"))
    assert (tmp_path / "trained.onnx").stat().st_ino != before.st_ino  # replaced (atomically: a new file)


def test_fine_tune_preset_and_validation_split(tmp_path):
    """--fine-tune: a tenth of lr.base, no warm-up, no Final Polishing, flags still override; a
    validation split is held out, evaluated each epoch, and ends the run early when asked."""
    cfg = config(tmp_path, epochs=3, final_polish_epochs=1)
    def printed(*args):
        p = dist_train("--config", cfg, *args, "--print-config")
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)
    merged = printed("--fine-tune")
    assert merged["lr"]["base"] == pytest.approx(0.005) and merged["lr"]["warmup_epochs"] == 0
    assert merged["final_polish_epochs"] == 0
    assert printed("--fine-tune", "--lr", "0.02")["lr"]["base"] == 0.02
    # Training holds out the last 2,000 images; a goal of 1% validation accuracy is met after epoch 1.
    s = ok(dist_train("--config", cfg, "--model", tmp_path / "tiny.onnx", "--fine-tune",
                      "--set", "data.validation_samples=2000", "--set", "stop_at_validation_accuracy=0.01"))
    assert s["stopped_early"] and s["epochs_run"] == 1 and 0.01 < s["validation_accuracy"] <= 1
    lines = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert len(lines) == 1 and "validation_accuracy" in lines[0]
    e = ok(dist_train("--config", cfg, "--set", "data.validation_samples=2000", "--evaluate", tmp_path / "trained.onnx",
                      "--split", "validation"))
    assert e["samples"] == 2000 and e["validation_accuracy"] == pytest.approx(s["validation_accuracy"])
    # Bad combinations are usage errors.
    for args in (["--set", "stop_at_validation_accuracy=0.5"], ["--set", "data.validation_samples=-1"],
                 ["--set", "data.validation_samples=60000", "-f"], ["--split", "validation"]):
        p = dist_train("--config", cfg, *args)
        assert p.returncode == 1, (args, p.stderr)
