"""scripts/pipeline.sh end to end on a tiny VGG-style model and a few hundred real Fashion-MNIST
images, 2 ranks: every step runs (huffgpu shards, training, the prune loop, sparsify-fcl,
fine-tuning, bn-polish, the report), the report's figures equal what the tools printed and what
an independent count gives, the plots are valid PNGs, onnxruntime runs the final model, a rerun
skips every step, and a failing step stops the pipeline with its exit status and message,
leaving the earlier steps' outputs intact."""
import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import onnx
from onnx import TensorProto, helper, numpy_helper

import hpcnn_test as H
from test_dist_train import FM, fashion_mnist, small_idx  # noqa: F401 (the dataset check)

REPO = Path(__file__).resolve().parents[2]


def tiny_vgg(path, seed=0, channels=1):
    """Conv(8)-BN-ReLU-Pool, Conv(16)-BN-ReLU-Pool, Flatten, FC(784 -> 64)-ReLU, FC(64 -> 10)."""
    rng = np.random.default_rng(seed)
    def w(*s):
        return (rng.standard_normal(s) * np.sqrt(2.0 / int(np.prod(s[1:])))).astype(np.float32)
    inits, nodes, x = [], [], "x"
    for i, (cin, cout) in enumerate([(channels, 8), (8, 16)]):
        inits += [numpy_helper.from_array(w(cout, cin, 3, 3), f"c{i}.w"),
                  numpy_helper.from_array(np.ones(cout, np.float32), f"b{i}.s"),
                  numpy_helper.from_array(np.zeros(cout, np.float32), f"b{i}.b"),
                  numpy_helper.from_array(np.zeros(cout, np.float32), f"b{i}.m"),
                  numpy_helper.from_array(np.ones(cout, np.float32), f"b{i}.v")]
        nodes += [helper.make_node("Conv", [x, f"c{i}.w"], [f"c{i}"], pads=[1, 1, 1, 1], name=f"conv{i}"),
                  helper.make_node("BatchNormalization", [f"c{i}", f"b{i}.s", f"b{i}.b", f"b{i}.m", f"b{i}.v"], [f"n{i}"],
                                   name=f"bn{i}"),
                  helper.make_node("Relu", [f"n{i}"], [f"r{i}"]),
                  helper.make_node("MaxPool", [f"r{i}"], [f"p{i}"], kernel_shape=[2, 2], strides=[2, 2])]
        x = f"p{i}"
    inits += [numpy_helper.from_array(w(64, 16 * 7 * 7), "fc1.w"), numpy_helper.from_array(np.zeros(64, np.float32), "fc1.b"),
              numpy_helper.from_array(w(10, 64), "fc2.w"), numpy_helper.from_array(np.zeros(10, np.float32), "fc2.b")]
    nodes += [helper.make_node("Flatten", [x], ["f"]),
              helper.make_node("Gemm", ["f", "fc1.w", "fc1.b"], ["h"], transB=1, name="fc1"),
              helper.make_node("Relu", ["h"], ["hr"]),
              helper.make_node("Gemm", ["hr", "fc2.w", "fc2.b"], ["logits"], transB=1, name="fc2")]
    g = helper.make_graph(nodes, "tiny_vgg", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, 28, 28])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    return str(path)


def setup_run(tmp, **over):
    data = small_idx(tmp, 640)
    # A test set of 256 other training images (indices 640..895), as IDX files.
    import gzip
    with gzip.open(f"{FM}/train-images-idx3-ubyte.gz") as f:
        img = f.read(16 + 896 * 784)
    with gzip.open(f"{FM}/train-labels-idx1-ubyte.gz") as f:
        lbl = f.read(8 + 896)
    (tmp / "test_img.idx").write_bytes(img[:4] + struct.pack(">I", 256) + img[8:16] + img[16 + 640 * 784:])
    (tmp / "test_lbl.idx").write_bytes(lbl[:4] + struct.pack(">I", 256) + lbl[8 + 640:])
    data["test_images"], data["test_labels"] = str(tmp / "test_img.idx"), str(tmp / "test_lbl.idx")
    train = {"model": tiny_vgg(tmp / "tiny_vgg.onnx"), "data": data, "epochs": 2, "batch_size": 32,
             "max_steps_per_epoch": 6, "eval_batch_size": 128, "threads": 1, "final_polish_epochs": 0,
             "augmentation": {"crop_padding": 2, "horizontal_flip": True, "mean": [0.286], "std": [0.353]},
             "optimizer": {"type": "sgd", "momentum": 0.9, "weight_decay": 5e-4},
             "lr": {"base": 0.05, "base_batch": 64, "warmup_epochs": 0}}
    (tmp / "train.json").write_text(json.dumps(train))
    cfg = {"train_config": str(tmp / "train.json"), "run_dir": str(tmp / "run"), "ranks": 2, "seed": 3,
           "validation_samples": 128, "train": {"epochs": 2},
           "prune": {"iterations": 1, "finetune_epochs": 1, "accuracy_drop": 50.0, "keep": ["fc1"], "finetune_lr": 0.01},
           "sparsify": {"compression": 4, "init": "data", "finetune_epochs": 1}, "polish": {"samples": 256}}
    cfg.update(over)
    (tmp / "pipeline.json").write_text(json.dumps(cfg))
    return tmp / "pipeline.json"


def pipeline(config, *args):
    env = dict(os.environ, HPCNN_BIN=H.BIN_DIR, OMP_NUM_THREADS="1")
    return subprocess.run(["bash", str(REPO / "scripts" / "pipeline.sh"), str(config), *args], capture_output=True,
                          text=True, env=env, timeout=900)


def is_png(path):
    data = Path(path).read_bytes()
    width, height = struct.unpack(">II", data[16:24])
    return data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and width > 100 and height > 100


def test_pipeline_runs_every_step_and_reports_what_the_tools_printed(tmp_path):
    cfg = setup_run(tmp_path)
    p = pipeline(cfg, "-q")
    assert p.returncode == 0, p.stderr
    run = tmp_path / "run"
    ran = {f.stem for f in (run / "steps").glob("*.json")}
    assert {"data-train_images", "data-train_labels", "data-test_images", "data-test_labels", "config", "train",
            "prune", "sparsify", "finetune", "polish", "report"} <= ran, ran
    assert {f"eval-{s}" for s in ("train", "prune", "sparsify", "finetune", "polish")} <= ran
    r = json.loads((run / "report.json").read_text())
    steps = {s["step"]: s for s in r["steps"]}
    assert list(steps) == ["train", "prune", "sparsify", "finetune", "polish"]
    # The figures are the tools' own: dist-train's summary after training and fine-tuning (same
    # model, same test set), the prune loop's summary, sparsify-fcl's report; parameters and MACs
    # equal an independent count.
    train_summary = json.loads((run / "1-train" / "summary.json").read_text().strip().splitlines()[-1])
    assert steps["train"]["test_accuracy"] == train_summary["test_accuracy"]
    tune_summary = json.loads((run / "4-finetune" / "summary.json").read_text().strip().splitlines()[-1])
    assert steps["finetune"]["test_accuracy"] == tune_summary["test_accuracy"]
    assert r["prune"] == json.loads((run / "2-prune" / "summary.json").read_text())
    assert steps["prune"]["parameters"] == r["prune"]["params_after"]
    fcl = json.loads((run / "3-sparsify" / "report.json").read_text())
    assert steps["sparsify"]["parameters"] == fcl["params_after"] and steps["sparsify"]["macs"] == fcl["macs_after"]
    assert fcl["layer_compression"] >= 4 and r["sparsify"]["layer"]["name"] == "fc1"
    for s in steps.values():
        m = onnx.load(s["model"])
        assert s["parameters"] == H.count_params(m) and s["macs"] == H.count_macs(m), s["step"]
    assert steps["sparsify"]["parameters"] < steps["prune"]["parameters"] < steps["train"]["parameters"]
    # prune.keep: the FC layer sparsify-fcl replaces keeps its 64 neurons through the prune loop.
    assert r["prune"]["keep"] == ["fc1"]
    assert "--keep fc1 --finetune-lr 0.01" in (run / "pipeline.log").read_text()
    tuned = [json.loads(l) for l in (run / "2-prune" / "it1" / "metrics.jsonl").read_text().splitlines()]
    assert tuned[0]["lr"] <= 0.01 + 1e-12
    pruned = {t.name: t for t in onnx.load(run / "2-prune" / "final.onnx").graph.initializer}
    assert pruned["fc1.w"].dims[0] == 64
    # The shards are huffgpu streams that decode to the data files.
    for d in r["data"]:
        assert Path(d["shard"]).read_bytes()[:4] == b"HUFG"
        dec = subprocess.run([H.tool("huffgpu-decode"), "-c", d["shard"]], capture_output=True, check=True).stdout
        assert dec == Path(d["source"]).read_bytes()
    # onnxruntime ran the final model over the test set and agreed with dist-train.
    c = r["onnxruntime_check"]
    assert abs(c["onnxruntime_test_accuracy"] - c["dist_train_test_accuracy"]) <= 0.005
    for png in ("curves.png", "kept_channels.png", "accuracy_vs_params.png"):
        assert is_png(run / png), png
    assert "| polish |" in (run / "report.md").read_text()
    # -q: one line per step on stderr, the commands in the log.
    assert "dist-train" in (run / "pipeline.log").read_text() and len(p.stderr.splitlines()) < 36, p.stderr  # steps + summary

    # A rerun skips every step and changes nothing.
    mtimes = {f: f.stat().st_mtime_ns for f in run.rglob("*.onnx")}
    p = pipeline(cfg)
    assert p.returncode == 0, p.stderr
    assert "train: up to date" in p.stderr and "$ " not in p.stderr
    assert {f: f.stat().st_mtime_ns for f in run.rglob("*.onnx")} == mtimes


def test_failing_step_stops_the_pipeline_and_keeps_earlier_outputs(tmp_path):
    # A compression no rank of the first FC layer can reach: sparsify-fcl refuses it.
    cfg = setup_run(tmp_path, sparsify={"compression": 1e9, "init": "svd", "finetune_epochs": 1})
    p = pipeline(cfg, "-q")
    run = tmp_path / "run"
    assert p.returncode != 0
    assert f"sparsify: failed with exit status {p.returncode}" in p.stderr, p.stderr
    assert "sparsify-fcl: error:" in p.stderr
    assert (run / "1-train" / "model.onnx").exists() and (run / "2-prune" / "final.onnx").exists()
    assert not (run / "3-sparsify" / "model.onnx").exists() and not (run / "4-finetune").exists()


def test_bad_pipeline_configuration(tmp_path):
    cfg = setup_run(tmp_path)
    c = json.loads(cfg.read_text())
    c["prune"]["iteration"] = 2
    cfg.write_text(json.dumps(c))
    p = pipeline(cfg)
    assert p.returncode == 1 and "unknown key 'prune.iteration' (valid keys: iterations" in p.stderr, p.stderr
    c["prune"].pop("iteration")
    c["prune"]["keep"] = ["fc9"]  # no such layer: refused before any training
    cfg.write_text(json.dumps(c))
    p = pipeline(cfg)
    assert p.returncode == 1 and "--keep names 'fc9'" in p.stderr and "prune.keep" in p.stderr, p.stderr
    assert not (tmp_path / "run" / "1-train").exists()
    cfg.write_text("{")
    p = pipeline(cfg)
    assert p.returncode == 1 and "not JSON" in p.stderr
    assert not (tmp_path / "run" / "1-train").exists()


def rgb_net(path, channels, size, seed=1):
    """Conv(C -> 2, 3x3) -> Relu -> Flatten -> Gemm(2*H*W -> 10), random weights: a model for any
    channel count and image size whose predictions depend on every pixel's place and value."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((2, channels, 3, 3)).astype(np.float32), "c.w"),
             numpy_helper.from_array(rng.standard_normal((10, 2 * size * size)).astype(np.float32), "fc.w"),
             numpy_helper.from_array(np.zeros(10, np.float32), "fc.b")]
    nodes = [helper.make_node("Conv", ["x", "c.w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]), helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], transB=1)]
    g = helper.make_graph(nodes, "rgb", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, size, size])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    return str(path)


def predictions(model, x):
    import onnxruntime as ort
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0].argmax(1)


@pytest.mark.parametrize("fmt", ["idx", "idx.gz", "npy-gray-u8", "npy-nchw-u8", "npy-nhwc-f32", "cifar10-bin", "npy.huf"])
def test_report_reads_every_data_format_the_tools_read(tmp_path, fmt):
    """The report's independent check (onnxruntime on the test set) reads what dist-train reads:
    the labels are a random model's own predictions on the images preprocessed here, by NumPy (so
    100% is right, and a wrong channel order or layout, or pixels not scaled to [0, 1], gives far
    less); both dist-train --evaluate and the report must find (nearly) 100%."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("pipeline_report", REPO / "scripts" / "pipeline_report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    rng = np.random.default_rng(5)
    n, c, size = 200, (1 if fmt in ("idx", "idx.gz", "npy-gray-u8") else 3), (28 if fmt.startswith("idx") else 32)
    pix = rng.integers(0, 256, (n, c, size, size), dtype=np.uint8)
    mean, std = [0.4, 0.5, 0.6][:c], [0.2, 0.25, 0.3][:c]
    x = ((pix.astype(np.float32) / 255 - np.float32(mean).reshape(1, c, 1, 1)) / np.float32(std).reshape(1, c, 1, 1)).astype(np.float32)
    model = rgb_net(tmp_path / "m.onnx", c, size)
    labels = predictions(model, x).astype(np.uint8)
    data = {}
    if fmt.startswith("idx"):
        img = struct.pack(">BBBBIII", 0, 0, 8, 3, n, size, size) + pix.tobytes()
        lbl = struct.pack(">BBBBI", 0, 0, 8, 1, n) + labels.tobytes()
        if fmt == "idx.gz":
            import gzip
            img, lbl = gzip.compress(img), gzip.compress(lbl)
        (tmp_path / f"img.{fmt}").write_bytes(img)
        (tmp_path / f"lbl.{fmt}").write_bytes(lbl)
        data = {"test_images": str(tmp_path / f"img.{fmt}"), "test_labels": str(tmp_path / f"lbl.{fmt}")}
    elif fmt == "cifar10-bin":
        (tmp_path / "test_batch.bin").write_bytes(np.concatenate([labels[:, None], pix.reshape(n, -1)], 1).tobytes())
        data = {"test_images": str(tmp_path / "test_batch.bin"), "test_labels": ""}
    else:
        arr = {"npy-gray-u8": pix[:, 0], "npy-nchw-u8": pix, "npy.huf": pix,
               "npy-nhwc-f32": (pix.astype(np.float32) / 255).transpose(0, 2, 3, 1)}[fmt]
        np.save(tmp_path / "img.npy", arr)
        np.save(tmp_path / "lbl.npy", labels.astype(np.int64))
        data = {"test_images": str(tmp_path / "img.npy"), "test_labels": str(tmp_path / "lbl.npy")}
        if fmt == "npy.huf":
            subprocess.run([H.tool("huffgpu-encode"), "--rm", str(tmp_path / "img.npy"), str(tmp_path / "lbl.npy")], check=True)
            data = {"test_images": str(tmp_path / "img.npy.huf"), "test_labels": str(tmp_path / "lbl.npy.huf")}
    cfg = {"model": model, "data": dict(data, train_images=data["test_images"], train_labels=data["test_labels"]),
           "augmentation": {"mean": mean, "std": std}, "eval_batch_size": 64, "threads": 1}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    p = subprocess.run([H.tool("dist-train"), "--config", str(tmp_path / "c.json"), "--evaluate", model], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    ours = json.loads(p.stdout.strip().splitlines()[-1])["test_accuracy"]
    theirs, skipped_why = report.onnxruntime_accuracy(model, cfg, H.BIN_DIR)
    assert skipped_why is None, skipped_why
    assert ours >= 0.98 and theirs >= 0.98, (fmt, ours, theirs)


def test_pipeline_on_rgb_npy_data_writes_its_report(tmp_path):
    """The whole chain on 3-channel channels-last float .npy data (Fashion-MNIST images as RGB in
    [0, 1]): every step runs, and the report, its plots and its onnxruntime check are written
    (the report used to die reading the test set as single-channel IDX)."""
    cfg_path = setup_run(tmp_path)
    cfg = json.loads(cfg_path.read_text())
    train = json.loads(Path(cfg["train_config"]).read_text())

    def rgb(key_img, key_lbl, name):
        raw = Path(train["data"][key_img]).read_bytes()
        n = struct.unpack(">I", raw[4:8])[0]
        gray = np.frombuffer(raw, np.uint8, offset=16).reshape(n, 28, 28).astype(np.float32) / 255
        np.save(tmp_path / f"{name}_img.npy", np.stack([gray, 1 - gray, gray * 0.5], axis=3))
        lbl = np.frombuffer(Path(train["data"][key_lbl]).read_bytes(), np.uint8, offset=8).astype(np.int64)
        np.save(tmp_path / f"{name}_lbl.npy", lbl)
        return str(tmp_path / f"{name}_img.npy"), str(tmp_path / f"{name}_lbl.npy")

    train["data"]["train_images"], train["data"]["train_labels"] = rgb("train_images", "train_labels", "train")
    train["data"]["test_images"], train["data"]["test_labels"] = rgb("test_images", "test_labels", "test")
    train["model"] = tiny_vgg(tmp_path / "rgb_vgg.onnx", channels=3)
    train["augmentation"]["mean"], train["augmentation"]["std"] = [0.29, 0.71, 0.14], [0.35, 0.35, 0.18]
    Path(cfg["train_config"]).write_text(json.dumps(train))
    p = pipeline(cfg_path, "-q")
    assert p.returncode == 0, p.stderr
    run = tmp_path / "run"
    r = json.loads((run / "report.json").read_text())
    assert [s["step"] for s in r["steps"]] == ["train", "prune", "sparsify", "finetune", "polish"]
    check = r["onnxruntime_check"]
    assert abs(check["onnxruntime_test_accuracy"] - check["dist_train_test_accuracy"]) <= 0.005, check
    assert (run / "report.md").exists() and all(is_png(run / f) for f in ("curves.png", "kept_channels.png", "accuracy_vs_params.png"))


def tiny_resnet(path, seed=0):
    """Conv(8)-Relu, a residual block Conv-Relu-Conv + skip, Relu, GlobalAveragePool, Flatten,
    Gemm(8 -> 10): a ResNet-style head (no FC layer after the convolutions that sparsify-fcl can
    replace: the pooled map comes from an Add) and no BatchNormalization (as PyTorch's default
    export leaves a model)."""
    rng = np.random.default_rng(seed)
    def w(*s):
        return (rng.standard_normal(s) * np.sqrt(2.0 / int(np.prod(s[1:])))).astype(np.float32)
    inits = [numpy_helper.from_array(w(8, 1, 3, 3), "c0.w"), numpy_helper.from_array(w(8, 8, 3, 3), "c1.w"),
             numpy_helper.from_array(w(8, 8, 3, 3), "c2.w"), numpy_helper.from_array(w(10, 8), "fc.w"),
             numpy_helper.from_array(np.zeros(10, np.float32), "fc.b")]
    nodes = [helper.make_node("Conv", ["x", "c0.w"], ["c0"], pads=[1, 1, 1, 1], name="conv0"),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "c1.w"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "c2.w"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Add", ["c2", "r0"], ["s"]), helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], transB=1, name="fc")]
    g = helper.make_graph(nodes, "tiny_resnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 28, 28])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    return str(path)


def test_steps_that_do_not_apply_are_skipped_with_their_reason(tmp_path):
    """A ResNet-style model without BatchNorm: sparsify-fcl finds no FC layer to replace (exit 4),
    so sparsify and its fine-tuning are skipped, and bn-polish finds no BatchNorm, so polish is
    skipped: each with its reason in the log, the report and the closing summary; the chain goes on
    and the report's final model is the pruned one. sparsify.enabled true makes the first a failure."""
    cfg_path = setup_run(tmp_path, prune={"iterations": 1, "finetune_epochs": 1, "accuracy_drop": 50.0})
    cfg = json.loads(cfg_path.read_text())
    train = json.loads(Path(cfg["train_config"]).read_text())
    train["model"] = tiny_resnet(tmp_path / "tiny_resnet.onnx")
    Path(cfg["train_config"]).write_text(json.dumps(train))
    p = pipeline(cfg_path, "-q")
    assert p.returncode == 0, p.stderr
    assert "sparsify: skipped: " in p.stderr and "no Conv -> Flatten/Reshape -> Gemm/MatMul pattern" in p.stderr, p.stderr
    assert "finetune: skipped: no sparse FC layer to fine-tune" in p.stderr
    assert "polish: skipped: final.onnx has no BatchNormalization node" in p.stderr and "folded into the convolutions" in p.stderr
    run = tmp_path / "run"
    r = json.loads((run / "report.json").read_text())
    assert [s["step"] for s in r["steps"]] == ["train", "prune"]
    assert [x["step"] for x in r["skipped"]] == ["sparsify", "finetune", "polish"]
    assert r["onnxruntime_check"]["model"].endswith("2-prune/final.onnx")
    summary = (run / "summary.txt").read_text()
    assert "overall:" in summary and "skipped: polish:" in summary and "next: the final model is" in summary, summary
    assert "Skipped: sparsify:" in (run / "report.md").read_text()
    # Asked for explicitly, the step's refusal stops the pipeline with sparsify-fcl's exit status.
    cfg["sparsify"] = dict(cfg.get("sparsify", {}), enabled=True)
    cfg_path.write_text(json.dumps(cfg))
    p = pipeline(cfg_path, "-q")
    assert p.returncode == 4 and "sparsify: failed with exit status 4" in p.stderr, p.stderr


def test_report_onnxruntime_check_of_a_model_onnxruntime_cannot_read(tmp_path, fashion_mnist):  # noqa: F811
    """onnx 1.19 writes IR version 12 by default, which the pinned onnxruntime cannot read: the
    report's independent check says it was skipped and why, instead of a traceback; the same model
    at IR 10 is checked (its accuracy computed in NumPy here: a linear model on the pixels)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("pipeline_report", REPO / "scripts" / "pipeline_report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((784, 10)) * 0.05).astype(np.float32)
    g = helper.make_graph([helper.make_node("Flatten", ["x"], ["f"]), helper.make_node("MatMul", ["f", "w"], ["y"])], "lin",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 28, 28])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], [numpy_helper.from_array(w, "w")])
    cfg = {"data": {"test_images": f"{FM}/t10k-images-idx3-ubyte.gz", "test_labels": f"{FM}/t10k-labels-idx1-ubyte.gz"},
           "augmentation": {"mean": [0.5], "std": [0.25]}}
    for ir in (12, 10):
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=ir)
        onnx.save(m, tmp_path / f"ir{ir}.onnx")
    accuracy, why = report.onnxruntime_accuracy(str(tmp_path / "ir12.onnx"), cfg, H.BIN_DIR)
    assert accuracy is None and why.startswith("skipped: onnxruntime") and "IR version" in why, why
    accuracy, why = report.onnxruntime_accuracy(str(tmp_path / "ir10.onnx"), cfg, H.BIN_DIR)
    images, labels = report.read_images(cfg["data"]["test_images"], H.BIN_DIR)
    labels = report.read_labels(cfg["data"]["test_labels"], H.BIN_DIR) if labels is None else labels
    x = ((images.reshape(len(images), -1).astype(np.float64) / 255 - 0.5) / 0.25)
    assert why is None and abs(accuracy - float(((x @ w).argmax(1) == labels).mean())) < 1e-3


def setup_regression_run(tmp, **over):
    """A tiny CosmoFlow-like 3-D regression model with a BatchNorm (test_dist_train_3d.py's
    cosmo_tiny) on int16 count volumes and float targets, and a pipeline configuration for it."""
    from test_dist_train_3d import config as config_3d, cosmo_tiny
    cosmo_tiny(str(tmp / "cosmo.onnx"), batchnorm=True)
    train = config_3d(tmp, epochs=2, augmentation={"random_axis_permutation": False})
    cfg = {"train_config": str(train), "run_dir": str(tmp / "run"), "ranks": 2, "seed": 3, "validation_samples": 16,
           "train": {"epochs": 2}, "prune": {"iterations": 2, "finetune_epochs": 1, "mae_increase": 0.5},
           "sparsify": {"compression": 3, "finetune_epochs": 1}}
    cfg.update(over)
    (tmp / "pipeline.json").write_text(json.dumps(cfg))
    return tmp / "pipeline.json"


def test_regression_pipeline_reports_mae(tmp_path):
    """A regression run ("task": "regression"): the prune loop keeps the validation MAE within
    prune.mae_increase; the report, its table, the closing summary and the plots say MAE and MSE
    where a classification run says accuracy; the onnxruntime check computes the test MAE on the
    log1p-normalised 5-D volumes and equals dist-train's. Every step runs (sparsify-fcl --init data
    measures the 5-D feature maps; bn-polish the 5-D BatchNorm)."""
    cfg_path = setup_regression_run(tmp_path)
    p = pipeline(cfg_path, "-q")
    assert p.returncode == 0, p.stderr
    run = tmp_path / "run"
    assert "prune: test MAE" in p.stderr and "test accuracy" not in p.stderr
    assert "--mae-increase 0.5" in (run / "pipeline.log").read_text()
    r = json.loads((run / "report.json").read_text())
    assert r["task"] == "regression"
    assert [s["step"] for s in r["steps"]] == ["train", "prune", "sparsify", "finetune", "polish"] and not r["skipped"]
    assert r["sparsify"]["init"] == "data" and r["polish"]["samples"] > 0
    for s in r["steps"]:
        e = json.loads((run / "eval" / f"{s['step']}.json").read_text())
        assert s["test_mae"] == e["mae"] and s["test_mse"] == e["mse"] and s["test_mae_per_target"] == e["mae_per_target"]
        assert "test_accuracy" not in s and "test_loss" not in s
    prune = json.loads((run / "2-prune" / "summary.json").read_text())
    assert r["prune"] == prune and prune["task"] == "regression" and prune["mae_increase"] == 0.5
    log = json.loads((run / "2-prune" / "log.json").read_text())
    assert all(e["accepted"] == (e["validation_mae"] <= prune["validation_mae_limit"]) for e in log)
    c = r["onnxruntime_check"]
    assert c["model"].endswith("5-polish/model.onnx") and c["dist_train_test_mae"] == r["steps"][-1]["test_mae"]
    assert c["onnxruntime_test_mae"] == pytest.approx(c["dist_train_test_mae"], rel=1e-4)
    assert c["onnxruntime_test_mse"] == pytest.approx(c["dist_train_test_mse"], rel=1e-4)
    md, summary = (run / "report.md").read_text(), (run / "summary.txt").read_text()
    assert "| test MAE | test MSE |" in md and "onnxruntime on the final model: test MAE" in md and "mae_vs_params.png" in md
    assert "test MAE" in summary and "overall:" in summary and "test MAE" in summary.splitlines()[-2]
    assert "accuracy" not in md.lower() and "accuracy" not in summary.lower(), md + summary
    assert is_png(run / "mae_vs_params.png") and is_png(run / "curves.png") and is_png(run / "kept_channels.png")
    assert not (run / "accuracy_vs_params.png").exists()


def test_regression_pipeline_configuration_errors(tmp_path):
    """prune.accuracy_drop with a regression training configuration and prune.mae_increase with a
    classification one are refused before any work."""
    cfg_path = setup_regression_run(tmp_path, prune={"accuracy_drop": 1.0})
    p = pipeline(cfg_path)
    assert p.returncode == 1 and "'prune.accuracy_drop' is a classification key" in p.stderr and "prune.mae_increase" in p.stderr
    assert not (tmp_path / "run").exists()
    cfg_path = setup_run(tmp_path, prune={"mae_increase": 0.1})
    p = pipeline(cfg_path)
    assert p.returncode == 1 and "'prune.mae_increase' is a regression key" in p.stderr, p.stderr
    cfg_path = setup_regression_run(tmp_path, prune={"mae_increase": -1})
    p = pipeline(cfg_path)
    assert p.returncode == 1 and "must be > -1" in p.stderr, p.stderr


def test_report_reads_volumes_and_targets(tmp_path):
    """The report's onnxruntime check on regression data as dist-train reads it: int16 volumes
    [N, C, D, H, W] (and channels-last [N, D, H, W, C]), raw or huffgpu-compressed, log1p then
    mean/std, float targets; its MAE and MSE equal dist-train --evaluate's."""
    import importlib.util
    from test_dist_train import dist_train, ok
    from test_dist_train_3d import config as config_3d, cosmo_tiny
    spec = importlib.util.spec_from_file_location("pipeline_report", REPO / "scripts" / "pipeline_report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    cosmo_tiny(str(tmp_path / "cosmo.onnx"))
    cfg = json.loads(config_3d(tmp_path).read_text())
    e = ok(dist_train("--config", tmp_path / "config.json", "--evaluate", tmp_path / "cosmo.onnx"))
    got, why = report.onnxruntime_accuracy(str(tmp_path / "cosmo.onnx"), cfg, H.BIN_DIR)
    assert why is None and got["mae"] == pytest.approx(e["mae"], rel=1e-5) and got["mse"] == pytest.approx(e["mse"], rel=1e-5)
    v = np.load(cfg["data"]["test_images"])
    np.save(tmp_path / "last.npy", np.moveaxis(v, 1, -1))  # channels-last
    subprocess.run([H.tool("huffgpu-encode"), "-q", "-f", str(tmp_path / "last.npy")], check=True)
    cfg["data"]["test_images"] = str(tmp_path / "last.npy.huf")
    got2, why = report.onnxruntime_accuracy(str(tmp_path / "cosmo.onnx"), cfg, H.BIN_DIR)
    assert why is None and got2 == got
