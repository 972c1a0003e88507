"""dist-train with inter-layer (pipeline) parallelism (issue 45; nn/pipeline.h,
train/pipeline_schedule.h): the model cut into P stages on P x D ranks (stage-major), each replica's
batch run as m micro-batches in GPipe or 1F1B order, activations and their gradients sent between
the stages by MPI_Isend/MPI_Irecv.

"Same as one process": BatchNormalization normalises each micro-batch with its own statistics (as
PyTorch's Pipe does), so the reference accumulates the same micro-batches: one process (or, for
D = 2 with BatchNorm, 2 data-parallel ranks: their BatchNorm sees each rank's micro-batch) with
batch_size / m and accumulation_steps = m. Models without BatchNorm (the CosmoFlow-like one) are
also compared with one process on the whole global batch. 3 steps; weights relative 1e-5.

(The file name: test_pipeline.py is the tool chain's pipeline test.)"""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import shape_inference

import hpcnn_test as H
from test_dist_train import config as fm_config, dist_train, ok, small_idx, tiny_cnn, weights
from test_dist_train_3d import config as cosmo_config

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def fm(tmp, model, **over):
    """Fashion-MNIST on 256 images (train and test), no checkpoint (a pipeline run refuses one)."""
    tmp.mkdir(exist_ok=True)
    d = small_idx(tmp, 256)
    d["test_images"], d["test_labels"] = d["train_images"], d["train_labels"]
    over = {"model": str(model), "epochs": 1, "max_steps_per_epoch": 3, "final_polish_epochs": 0, "deterministic": True,
            "data": d, "checkpoint": {"path": ""}, **over}
    return fm_config(tmp, **over)


def run(cfg, ranks, *args):
    return dist_train("--config", cfg, *map(str, args), ranks=ranks if ranks > 1 else 0)


def assert_same_weights(a_path, b_path, start=None):
    a, b = weights(a_path), weights(b_path)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6 * max(np.abs(a[k]).max(), 1e-30), err_msg=k)
    if start is not None:  # the weights did train
        s = weights(start)
        assert any(not np.allclose(a[k], s[k]) for k in a if k.endswith("w") or k.endswith("weight"))


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_train_models.py"), str(d)], check=True,
                   capture_output=True)
    return d / "fashion_mnist_resnet.onnx"


def block_cut(model_path):
    """A cut inside ResNet-20's second BasicBlock (after its first conv's ReLU): the block's input
    crosses the cut too, on its identity shortcut to the Add. Returns (cut tensor, the values
    crossing it, their per-sample bytes) found with onnx's own shape inference."""
    m = shape_inference.infer_shapes(onnx.load(model_path))
    nodes = list(m.graph.node)
    adds = [i for i, n in enumerate(nodes) if n.op_type == "Add"]
    first_add = adds[0]
    # The second block starts after the first Add's Relu; its first conv's Relu is the 3rd node after BN.
    start = first_add + 2
    relu = next(i for i in range(start, len(nodes)) if nodes[i].op_type == "Relu")
    cut = nodes[relu].output[0]
    produced_before = {o for n in nodes[:relu + 1] for o in n.output} | {"input"}
    read_after = {i for n in nodes[relu + 1:] for i in n.input}
    crossing = sorted(produced_before & read_after)
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in m.graph.value_info}
    sample_bytes = sum(4 * int(np.prod(dims[c][1:])) for c in crossing)
    return cut, crossing, sample_bytes


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_cnn_two_stages_equal_one_process(tmp_path, schedule):
    """Tiny CNN (BatchNorm): P = 2, m = 4 against one process accumulating the same 4 micro-batches."""
    ref = ok(run(fm(tmp_path / "one", tmp_path / "tiny.onnx", batch_size=4, accumulation_steps=4), 1))
    p = run(fm(tmp_path / "pipe", tmp_path / "tiny.onnx", batch_size=16), 2, "--pipeline-stages", 2, "--micro-batches", 4,
            "--pipeline-schedule", schedule)
    s = ok(p)
    assert s["pipeline_stages"] == 2 and s["micro_batches"] == 4 and s["steps"] == 3
    assert s["global_batch"] == ref["global_batch"] == 16
    assert "pipeline stage 0:" in p.stderr and "pipeline stage 1:" in p.stderr
    assert_same_weights(tmp_path / "one" / "trained.onnx", tmp_path / "pipe" / "trained.onnx", tmp_path / "tiny.onnx")
    assert s["train_loss"] == pytest.approx(ref["train_loss"], rel=1e-5)
    assert s["train_accuracy"] == ref["train_accuracy"]
    assert s["test_loss"] == pytest.approx(ref["test_loss"], rel=1e-5)
    # Stage-to-stage bytes: what crosses the cut (the log names it) x batch x 2 directions.
    assert s["pipeline_bytes_per_step"] == s["pipeline_bytes_per_step_closed_form"]
    assert s["pipeline_bubble_closed_form"] == pytest.approx(1 / 5)
    # GPipe re-runs m - 1 forwards per step on every stage; 1F1B none on the last stage.
    if schedule == "gpipe":
        assert s["pipeline_recomputed_per_step"] == [3, 3]
    else:
        assert s["pipeline_recomputed_per_step"][1] == 0
    metrics = [json.loads(l) for l in (tmp_path / "pipe" / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 1 and metrics[0]["pipeline_bytes_per_step"] == s["pipeline_bytes_per_step"]


def test_dropout_masks_survive_recomputation(tmp_path):
    """The tiny CNN with Dropout(0.3) before its Gemm, in stage 1 (the MAC balance cuts after the
    first MaxPool): the stage reseeds its generator per micro-batch as one process seeds its
    accumulation steps, and GPipe's recomputed forwards (3 of 4 per step) redraw the same masks, so
    the weights still equal one process's. (A wrong mask in a recomputation would give the backward
    other activations than the forward.)"""
    model = tiny_cnn(str(tmp_path / "tiny_dropout.onnx"), dropout=True)
    ref = ok(run(fm(tmp_path / "one", model, batch_size=4, accumulation_steps=4), 1))
    p = run(fm(tmp_path / "pipe", model, batch_size=16), 2, "--pipeline-stages", 2, "--micro-batches", 4)
    s = ok(p)
    assert "sends p1 (6272 bytes per sample)" in p.stderr, p.stderr[-3000:]
    assert s["pipeline_recomputed_per_step"] == [3, 3]
    assert_same_weights(tmp_path / "one" / "trained.onnx", tmp_path / "pipe" / "trained.onnx", model)
    assert s["train_loss"] == pytest.approx(ref["train_loss"], rel=1e-5)


def test_cnn_2x2_equals_data_parallel_and_1f1b_equals_gpipe(tmp_path):
    """P x D = 2 x 2 against 2 data-parallel ranks accumulating the same micro-batches (BatchNorm:
    each replica's micro-batch), and 1F1B against GPipe on the same 4 ranks."""
    ref = ok(run(fm(tmp_path / "dp", tmp_path / "tiny.onnx", batch_size=4, accumulation_steps=2), 2))
    out = {}
    for sched in ("gpipe", "1f1b"):
        s = ok(run(fm(tmp_path / sched, tmp_path / "tiny.onnx", batch_size=8), 4, "--pipeline-stages", 2, "--micro-batches", 2,
                   "--pipeline-schedule", sched))
        assert s["global_batch"] == ref["global_batch"] == 16 and s["world_size"] == 4
        assert s["train_loss"] == pytest.approx(ref["train_loss"], rel=1e-5)
        out[sched] = s
        assert_same_weights(tmp_path / "dp" / "trained.onnx", tmp_path / sched / "trained.onnx", tmp_path / "tiny.onnx")
    assert_same_weights(tmp_path / "gpipe" / "trained.onnx", tmp_path / "1f1b" / "trained.onnx")
    # 1F1B keeps fewer stage inputs in flight on stage 0 (P - s = 2 of m = 2 here: equal) and the
    # last stage (1 against 2).
    assert out["1f1b"]["pipeline_peak_stashed_bytes"][1] < out["gpipe"]["pipeline_peak_stashed_bytes"][1]


@pytest.mark.parametrize("ranks", [2, 4])
def test_resnet20_cut_across_a_skip_connection(tmp_path, resnet, ranks):
    """ResNet-20 cut inside a residual block: the block input crosses the cut with the cut tensor."""
    cut, crossing, sample_bytes = block_cut(resnet)
    assert len(crossing) == 2  # the cut tensor and the shortcut
    replicas = ranks // 2
    if replicas == 1:
        ref = ok(run(fm(tmp_path / "ref", resnet, batch_size=2, accumulation_steps=2), 1))
    else:
        ref = ok(run(fm(tmp_path / "ref", resnet, batch_size=2, accumulation_steps=2), 2))
    p = run(fm(tmp_path / "pipe", resnet, batch_size=4), ranks, "--pipeline-stages", 2, "--micro-batches", 2,
            "--pipeline-cuts", cut)
    s = ok(p)
    assert "sends " + ", ".join(sorted(crossing)) in p.stderr or all(c in p.stderr for c in crossing)
    assert_same_weights(tmp_path / "ref" / "trained.onnx", tmp_path / "pipe" / "trained.onnx", resnet)
    assert s["train_loss"] == pytest.approx(ref["train_loss"], rel=1e-5)
    # Closed form from onnx's shape inference: both crossing values, batch 4, two directions.
    assert s["pipeline_bytes_per_step"] == s["pipeline_bytes_per_step_closed_form"] == 2 * 4 * sample_bytes



def masked_tiny(tmp, rate):
    """The tiny CNN with the smallest-L1 filters of c1 (8) and c2 (16) masked by prune-rate
    --rate R --mask-channels; returns the model and the removed channels its report names."""
    tmp.mkdir(exist_ok=True)
    src = tiny_cnn(str(tmp / "tiny.onnx"))
    out = tmp / f"masked{rate}.onnx"
    report = H.prune(src, out, "--rate", rate, "--mask-channels")
    return out, {L["name"]: L["removed_channels"] for L in report["layers"]}


def zero_channels_by_onnxruntime(model, value):
    """The channels of `value` that are exactly 0 for a random batch, found by running the masked
    model in onnxruntime with `value` as an extra graph output (independent of dist-train's
    analysis)."""
    m = onnx.load(model)
    m.graph.output.append(onnx.helper.make_tensor_value_info(value, onnx.TensorProto.FLOAT, None))
    inits = {t.name for t in m.graph.initializer}
    x = next(i.name for i in m.graph.input if i.name not in inits)
    outs, _ = H.ort_run(m, {x: np.random.default_rng(1).standard_normal((8, 1, 28, 28)).astype(np.float32)})
    return [c for c in range(outs[-1].shape[1]) if np.all(outs[-1][:, c] == 0)]


@pytest.mark.parametrize("rate,cut,layer,C,hw,kept", [(0.5, "p1", "c1", 8, 14 * 14, 4), (0.75, "p1", "c1", 8, 14 * 14, 2),
                                                    (0.5, "p2", "c2", 16, 7 * 7, 8)])
def test_masked_channels_equal_dense_messages_and_one_process(tmp_path, rate, cut, layer, C, hw, kept):
    """The tiny CNN with half (a quarter) of c1's and c2's channels kept: P = 2, m = 4 with masked
    stage messages against P = 2 with dense ones and one process accumulating the 4 micro-batches:
    same losses and weights after 3 steps. Cut at p1 = MaxPool(Relu(BN(c1))), [8, 14, 14] per sample
    (held at zero by the BatchNormalization's zero scale and bias), or at p2 = MaxPool(Relu(c2)),
    [16, 7, 7] (held by c2's zero filters and biases, which join the fixed mask): the messages carry
    the kept channels only, kept x H x W x 4 bytes per sample, 16 samples, forward and backward.
    The masked channels' parameters stay exactly 0."""
    model, removed = masked_tiny(tmp_path / "m", rate)
    assert len(removed[layer]) == C - kept
    assert zero_channels_by_onnxruntime(model, cut) == removed[layer]
    ref = ok(run(fm(tmp_path / "one", model, batch_size=4, accumulation_steps=4), 1))
    pipe = ["--pipeline-stages", 2, "--micro-batches", 4, "--pipeline-cuts", cut]
    dense = ok(run(fm(tmp_path / "dense", model, batch_size=16), 2, *pipe))
    p = run(fm(tmp_path / "masked", model, batch_size=16), 2, *pipe, "--pipeline-masked-channels")
    s = ok(p)
    assert s["pipeline_masked_channels"] is True and dense["pipeline_masked_channels"] is False
    assert f"'{cut}' {kept} of {C} channels; {kept * hw * 4} bytes per sample (dense {C * hw * 4})" in p.stderr, p.stderr[-3000:]
    assert s["pipeline_bytes_per_step"] == s["pipeline_bytes_per_step_closed_form"] == 2 * 16 * kept * hw * 4
    assert dense["pipeline_bytes_per_step"] == dense["pipeline_bytes_per_step_closed_form"] == 2 * 16 * C * hw * 4
    for d, r in (("dense", dense), ("masked", s)):
        assert_same_weights(tmp_path / "one" / "trained.onnx", tmp_path / d / "trained.onnx", model)
        assert r["train_loss"] == pytest.approx(ref["train_loss"], rel=1e-5)
        assert r["test_loss"] == pytest.approx(ref["test_loss"], rel=1e-5)
        assert r["train_accuracy"] == ref["train_accuracy"]
    w, start = weights(tmp_path / "masked" / "trained.onnx"), weights(model)
    c1, c2 = removed["c1"], removed["c2"]
    for name, ch in (("c1.w", c1), ("bn.scale", c1), ("bn.bias", c1), ("c2.w", c2), ("c2.b", c2)):
        assert np.all(w[name][ch] == 0), name
    kept1 = [c for c in range(8) if c not in c1]
    assert not np.allclose(w["c1.w"][kept1], start["c1.w"][kept1])  # the kept channels trained


def test_masked_resnet20_cut_across_a_skip_connection(tmp_path, resnet):
    """ResNet-20 masked by prune-rate --rate 0.5 --mask-channels, cut inside its second residual
    block: both crossing values (the block's first ReLU and the shortcut, whose channels are tied to
    every block of the stage) travel as their non-zero channels. P = 2 with masked messages equals one
    process accumulating the same 2 micro-batches; the bytes per step equal the closed form from the
    zero channels onnxruntime finds and onnx's shape inference: sum of kept channels x H x W x 4 bytes,
    4 samples, 2 directions."""
    masked = tmp_path / "masked.onnx"
    report = H.prune(resnet, masked, "--rate", "0.5", "--mask-channels")
    assert any(L["removed_channels"] for L in report["layers"])
    cut, crossing, dense_bytes = block_cut(masked)
    m = shape_inference.infer_shapes(onnx.load(masked))
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in m.graph.value_info}
    kept_bytes = 0
    for v in crossing:
        zero = zero_channels_by_onnxruntime(masked, v)
        assert len(zero) == dims[v][1] // 2, v  # half of every group's channels
        kept_bytes += 4 * (dims[v][1] - len(zero)) * int(np.prod(dims[v][2:]))
    ref = ok(run(fm(tmp_path / "ref", masked, batch_size=2, accumulation_steps=2), 1))
    p = run(fm(tmp_path / "pipe", masked, batch_size=4), 2, "--pipeline-stages", 2, "--micro-batches", 2, "--pipeline-cuts", cut,
            "--pipeline-masked-channels")
    s = ok(p)
    assert_same_weights(tmp_path / "ref" / "trained.onnx", tmp_path / "pipe" / "trained.onnx", masked)
    assert s["train_loss"] == pytest.approx(ref["train_loss"], rel=1e-5)
    assert s["pipeline_bytes_per_step"] == s["pipeline_bytes_per_step_closed_form"] == 2 * 4 * kept_bytes
    assert 2 * kept_bytes == dense_bytes


def test_masked_channels_refuse_a_mask_that_keeps_them(tmp_path):
    """A `mask` model (the fixed sparsity mask) that keeps a masked channel's filter: refused before
    training, naming the tensor and the channel. Cut at p2 = MaxPool(Relu(c2)): c2's zero filters
    and biases hold its masked channels at zero (at p1 the BatchNormalization's zero scale and bias
    do, whatever c1's filters hold)."""
    model, removed = masked_tiny(tmp_path / "m", 0.5)
    p = run(fm(tmp_path / "r", model, batch_size=16, mask=str(tmp_path / "m" / "tiny.onnx")), 2, "--pipeline-stages", 2,
            "--micro-batches", 4, "--pipeline-cuts", "p2", "--pipeline-masked-channels")
    assert p.returncode == 1, p.stderr[-2000:]
    assert f"keeps channel {removed['c2'][0]} of 'c2.w'" in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "r" / "trained.onnx").exists()


@pytest.mark.parametrize("ranks,cut,sent,sample_bytes", [(2, None, "p1", 8 * 4 ** 3 * 4), (4, "c1", "c1", 8 * 8 ** 3 * 4)])
def test_cosmoflow_like_equals_one_process(tmp_path, ranks, cut, sent, sample_bytes):
    """The tiny CosmoFlow-like 3-D regression model (no BatchNorm): against one process on the whole
    global batch (batch x replicas) at once. Balanced by MACs (the 3-D conv holds nearly all: stage 0
    ends with it or later; ties go to the fewest bytes) the cut follows the MaxPool (8 x 4^3 values
    per sample cross; the Gemm's 2048 MACs would make stage 0 the larger); named at the conv's
    output, its 8 x 8^3 activations cross."""
    replicas = ranks // 2
    for d in ("one", "pipe"):
        (tmp_path / d).mkdir()
    common = dict(epochs=1, max_steps_per_epoch=3, deterministic=True, model=str(tmp_path / "cosmo.onnx"))
    ref = ok(run(cosmo_config(tmp_path / "one", batch_size=8 * replicas, **common), 1))
    args = ["--pipeline-stages", 2, "--micro-batches", 2] + (["--pipeline-cuts", cut] if cut else [])
    p = run(cosmo_config(tmp_path / "pipe", batch_size=8, **common), ranks, *args)
    s = ok(p)
    assert f"sends {sent} ({sample_bytes} bytes per sample)" in p.stderr, p.stderr[-3000:]
    assert_same_weights(tmp_path / "one" / "trained.onnx", tmp_path / "pipe" / "trained.onnx", tmp_path / "cosmo.onnx")
    assert s["train_loss"] == pytest.approx(ref["train_loss"], rel=1e-5)
    assert s["test_mae"] == pytest.approx(ref["test_mae"], rel=1e-5)
    assert s["pipeline_bytes_per_step"] == s["pipeline_bytes_per_step_closed_form"] == 2 * 8 * sample_bytes


def test_refusals_before_training(tmp_path):
    """Bad splits: clear usage errors (exit 1) before any step, nothing written."""
    cases = [
        (("--pipeline-stages", 2, "--micro-batches", 1), "parallel.micro_batches 1 is smaller than the 2 pipeline stages"),
        (("--pipeline-stages", 8, "--micro-batches", 8), "parallel.pipeline 8 is larger than the 7 nodes of"),
        (("--pipeline-stages", 2, "--micro-batches", 2, "--pipeline-cuts", "nope"), "pipeline cut tensor 'nope' does not exist in"),
        (("--pipeline-stages", 3, "--micro-batches", 4, "--pipeline-cuts", "r1,c1"), "leaves stage 1 of"),
        (("--pipeline-stages", 2, "--micro-batches", 2, "--pipeline-cuts", "y"), "leaves stage 1 of"),
        (("--pipeline-stages", 2, "--micro-batches", 2, "--pipeline-cuts", "x"), "is not produced by a node"),
        (("--pipeline-stages", 2, "--micro-batches", 3), "batch_size 8 is not divisible by parallel.micro_batches 3"),
        (("--pipeline-stages", 2, "--micro-batches", 2), "parallel.pipeline 2 does not divide the 1 ranks"),
    ]
    for i, (args, msg) in enumerate(cases):
        d = tmp_path / f"c{i}"
        d.mkdir()
        cfg = cosmo_config(d, epochs=1, max_steps_per_epoch=3, model=str(tmp_path / "cosmo.onnx"))
        p = run(cfg, 1, *args)
        assert p.returncode == 1 and msg in p.stderr, (args, p.stderr[-2000:])
        assert not (d / "trained.onnx").exists() and not (d / "metrics.jsonl").exists(), args
