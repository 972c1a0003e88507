"""sparsify-fcl (Matsumura et al., CCPE 2021) on small hand-built models: the rewrite checked with
onnx.checker and onnxruntime, the factors against NumPy's SVD, the untouched nodes and initializers
compared as protobuf messages, the engine against onnxruntime, and bad inputs."""
import json
import os
import subprocess

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from hpcnn_test import Builder, count_params, ort_run, run, tool, weights_of

C, H, W, O = 8, 3, 3, 10


def model(fc="gemm_t", flatten="flatten", dropout=True, seed=21):
    """Conv(3->8) -> BN -> Relu -> MaxPool -> [8, 3, 3] -> flatten -> (Dropout) -> FC(72 -> 10) -> Relu -> Gemm(10 -> 5)."""
    b = Builder(seed)
    x = b.op("MaxPool", [b.op("Relu", [b.bn(b.conv("x", 3, C, name="conv"), C)])], kernel_shape=[2, 2], strides=[2, 2])
    if flatten == "flatten":
        x = b.op("Flatten", [x])
    else:
        x = b.op("Reshape", [x, b.const("flat", np.array(flatten, np.int64))])
    if dropout:
        x = b.op("Dropout", [x])
    if fc == "gemm_t":
        x = b.gemm(x, C * H * W, O, trans_b=1, name="fc1")
    elif fc == "gemm":
        x = b.gemm(x, C * H * W, O, trans_b=0, name="fc1")
    else:
        x = b.matmul(x, C * H * W, O, name="fc1")
    x = b.op("Relu", [x])
    return b.model(b.gemm(x, O, 5, name="fc2"), [2, 3, 6, 6])


def dense_weight(m):
    """W[o, c*HW + s] of fc1 as float64."""
    w = weights_of(m)["fc1.weight"].astype(np.float64)
    node = next(n for n in m.graph.node if n.name == "fc1")
    trans_b = any(a.name == "transB" and a.i for a in node.attribute)
    return w if trans_b else w.T


def sparsify(tmp, m, *args, check=True):
    src, dst = tmp / "m.onnx", tmp / "s.onnx"
    onnx.save(m, src)
    p = run("sparsify-fcl", src, "-o", dst, "-f", *args, check=check)
    return (json.loads(p.stdout), onnx.load(dst)) if p.returncode == 0 else p


def factors(s, structure):
    """(reduction weight, fc1 weight as [O, F']) of the written model."""
    w = weights_of(s)
    red = next(n for n in s.graph.node if n.op_type == "Conv" and n.name.startswith("fc1."))
    a = w[red.input[1]].astype(np.float64)
    fcw = dense_weight(s)
    return a, fcw


@pytest.mark.parametrize("fc", ["gemm_t", "gemm", "matmul"])
@pytest.mark.parametrize("flatten", ["flatten", [2, C * H * W], [2, -1]])
def test_full_rank_reproduces_the_dense_model(tmp_path, fc, flatten):
    m = model(fc, flatten)
    report, s = sparsify(tmp_path, m, "--channels", C, "--allow-full-rank")
    onnx.checker.check_model(s, full_check=True)
    assert report["rank"] == C and report["init_relative_error"] < 1e-12
    (a,), feeds = ort_run(m)
    (b,), _ = ort_run(s, feeds)
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * np.abs(a).max())


def test_spatial_full_rank_reproduces_the_dense_model(tmp_path):
    m = model()
    report, s = sparsify(tmp_path, m, "--structure", "spatial", "--spatial-width", H * W, "--allow-full-rank")
    onnx.checker.check_model(s, full_check=True)
    red = next(n for n in s.graph.node if n.op_type == "Conv" and n.name.startswith("fc1."))
    assert helper.get_attribute_value(next(a for a in red.attribute if a.name == "group")) == C
    (a,), feeds = ort_run(m)
    (b,), _ = ort_run(s, feeds)
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * np.abs(a).max())


@pytest.mark.parametrize("rank", [1, 3, 6])
def test_channel_svd_is_the_best_rank_r_approximation(tmp_path, rank):
    m = model()
    report, s = sparsify(tmp_path, m, "--channels", rank)
    Wd = dense_weight(m)
    M = Wd.reshape(O, C, H * W).transpose(0, 2, 1).reshape(O * H * W, C)  # M[(o, s), c]
    u, sv, vt = np.linalg.svd(M, full_matrices=False)
    best = (u[:, :rank] * sv[:rank]) @ vt[:rank]
    a, fcw = factors(s, "channel")
    assert a.shape == (rank, C, 1, 1) and fcw.shape == (O, rank * H * W)
    B = fcw.reshape(O, rank, H * W).transpose(0, 2, 1).reshape(O * H * W, rank)
    np.testing.assert_allclose(B @ a.reshape(rank, C), best, rtol=1e-5, atol=1e-6)
    assert report["init_relative_error"] == pytest.approx(np.sqrt((sv[rank:] ** 2).sum() / (sv ** 2).sum()), rel=1e-6)
    # Parameters: the formula of the layer, and the model counted independently.
    assert report["layer_params_before"] == O * C * H * W + O
    assert report["layer_params_after"] == rank * C + rank + O * rank * H * W + O
    assert report["params_before"] == count_params(m) and report["params_after"] == count_params(s)
    assert report["layer_compression"] == pytest.approx(report["layer_params_before"] / report["layer_params_after"])


def test_spatial_svd_per_channel(tmp_path):
    k = 2
    m = model()
    report, s = sparsify(tmp_path, m, "--structure", "spatial", "--spatial-width", k)
    Wd = dense_weight(m).reshape(O, C, H * W)
    q = weights_of(s)[next(n for n in s.graph.node if n.op_type == "Conv" and n.name.startswith("fc1.")).input[1]]
    q = q.astype(np.float64).reshape(C, k, H * W)
    p = dense_weight(s).reshape(O, C, k)
    err2 = 0.0
    for c in range(C):
        u, sv, vt = np.linalg.svd(Wd[:, c, :], full_matrices=False)
        np.testing.assert_allclose(p[:, c, :] @ q[c], (u[:, :k] * sv[:k]) @ vt[:k], rtol=1e-5, atol=1e-6)
        err2 += (sv[k:] ** 2).sum()
    assert report["init_relative_error"] == pytest.approx(np.sqrt(err2 / (Wd ** 2).sum()), rel=1e-6)


def test_other_nodes_and_initializers_are_unchanged(tmp_path):
    m = model(flatten=[2, C * H * W])
    _, s = sparsify(tmp_path, m, "--compression", 3)
    new_inits = {t.name: t for t in s.graph.initializer}
    for t in m.graph.initializer:
        if t.name in ("fc1.weight", "flat"):
            continue
        assert new_inits[t.name] == t, t.name
    assert "flat" not in new_inits  # the old flatten target had no other reader
    new_nodes = {n.name: n for n in s.graph.node}
    for n in m.graph.node:
        if n.op_type == "Reshape":
            continue  # reads the reduced output and a new target
        assert new_nodes[n.name] == n, n.name
    assert len(s.graph.node) == len(m.graph.node) + 1


def test_compression_picks_the_largest_rank_that_reaches_it(tmp_path):
    m = model()
    dense = O * C * H * W + O
    report, _ = sparsify(tmp_path, m, "--compression", 3)
    r = report["rank"]
    def sparse(r):
        return r * C + r + O * r * H * W + O
    assert dense / sparse(r) >= 3 and (r == C or dense / sparse(r + 1) < 3)


def test_random_init_and_the_engine_agree_with_onnxruntime(tmp_path):
    """The sparse model through the training engine (dist-train --evaluate) and onnxruntime: the
    same mean cross-entropy on the same images."""
    m = model(dropout=False)
    _, s = sparsify(tmp_path, m, "--channels", 3, "--init", "random", "--seed", "5")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (64, 3, 6, 6), dtype=np.uint8)
    labels = rng.integers(0, 5, 64).astype(np.int64)
    np.save(tmp_path / "x.npy", images)
    np.save(tmp_path / "y.npy", labels)
    cfg = {"model": str(tmp_path / "s.onnx"),
           "data": {"train_images": str(tmp_path / "x.npy"), "train_labels": str(tmp_path / "y.npy"),
                    "test_images": str(tmp_path / "x.npy"), "test_labels": str(tmp_path / "y.npy")},
           "augmentation": {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}, "eval_batch_size": 2, "threads": 1}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    p = subprocess.run([tool("dist-train"), "--config", tmp_path / "c.json", "--evaluate", tmp_path / "s.onnx"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    ours = json.loads(p.stdout.strip().splitlines()[-1])
    x = ((images.astype(np.float32) / 255 - 0.5) / 0.25).astype(np.float32)
    losses = []
    for i in range(0, 64, 2):
        (z,), _ = ort_run(s, {"x": x[i:i + 2]})
        z = z.astype(np.float64) - z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        losses += list(-logp[np.arange(2), labels[i:i + 2]])
    assert ours["test_loss"] == pytest.approx(np.mean(losses), rel=1e-5)


def gap_model(pool="GlobalAveragePool", seed=3):
    """The ResNet-style head: Conv(3->8) -> BN -> Relu -> global pooling -> Flatten -> Gemm(8 -> 6) -> Relu -> Gemm(6 -> 3)."""
    b = Builder(seed)
    g = b.op("Flatten", [b.op(pool, [b.op("Relu", [b.bn(b.conv("x", 3, 8, name="c"), 8)])])])
    return b.model(b.gemm(b.op("Relu", [b.gemm(g, 8, 6, trans_b=1, name="fc1")]), 6, 3, name="fc2"), [2, 3, 6, 6])


@pytest.mark.parametrize("pool", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pooling_head_is_a_rank_r_factorisation_of_the_fc(tmp_path, pool):
    """After global pooling the map is 1x1: the channel structure factors the FC weight W [O, C] as
    B [O, r] A [r, C], the truncated SVD (NumPy's) at rank r; full rank reproduces the model
    (onnxruntime); the parameter count is r*C + r + O*r + O; the spatial structure is refused."""
    m = gap_model(pool)
    report, s = sparsify(tmp_path, m, "--channels", 8, "--allow-full-rank")
    onnx.checker.check_model(s, full_check=True)
    (a,), feeds = ort_run(m)
    (b,), _ = ort_run(s, feeds)
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * np.abs(a).max())
    r, Cg, Og = 3, 8, 6
    report, s = sparsify(tmp_path, m, "--channels", r)
    a_red, fcw = factors(s, "channel")
    approx = fcw @ a_red.reshape(r, Cg)
    w = dense_weight(m)
    u, sv, vt = np.linalg.svd(w)
    best = (u[:, :r] * sv[:r]) @ vt[:r]
    np.testing.assert_allclose(approx, best, rtol=1e-6, atol=1e-6 * np.abs(best).max())
    assert count_params(s) - count_params(m) == (r * Cg + r + Og * r + Og) - (Og * Cg + Og)
    p = sparsify(tmp_path, m, "--structure", "spatial", "--spatial-width", 1, check=False)
    assert p.returncode == 1 and "1x1 (global pooling)" in p.stderr, p.stderr


def _write(path, data):
    path.write_bytes(data)
    return path


def test_bad_inputs(tmp_path):
    m = model()
    onnx.save(m, tmp_path / "m.onnx")
    src = tmp_path / "m.onnx"
    out = tmp_path / "o.onnx"

    def fails(args, code, *words, model_path=src):
        p = run("sparsify-fcl", model_path, "-o", out, *args, check=False)
        assert p.returncode == code, (args, p.returncode, p.stderr)
        assert p.stderr.startswith("sparsify-fcl: error: "), p.stderr
        for w in words:
            assert w in p.stderr, (w, p.stderr)
        assert not out.exists()
        assert not [f for f in os.listdir(tmp_path) if f.startswith(".o.onnx") or f.endswith(".tmp")]

    fails(["--channels", C], 1, "full rank", "--allow-full-rank")
    fails(["--channels", C + 1, "--allow-full-rank"], 1, "must lie in [1, 8]")
    fails([], 1, "--channels")
    fails(["--channels", 2, "--compression", 3], 1)
    fails(["--spatial-width", 2], 1, "--structure spatial")
    fails(["--compression", 1000], 1, "out of reach")
    fails(["--channels", 2, "--layer", "fc2"], 4, "fc2")
    fails(["--channels", 2, "--layer", "nope"], 4, "no node of that name")
    # No pattern: a flatten whose input comes from a Conv only through an Add (a residual sum).
    b = Builder(3)
    c = b.op("Relu", [b.conv("x", 3, 8, name="c")])
    g = b.op("Flatten", [b.op("GlobalAveragePool", [b.op("Add", [c, c])])])
    no_fc = b.model(b.gemm(b.op("Relu", [b.gemm(g, 8, 6, name="f1")]), 6, 3, name="f2"), [1, 3, 6, 6])
    onnx.save(no_fc, tmp_path / "add.onnx")
    fails(["--channels", 2], 4, "no Conv -> Flatten/Reshape -> Gemm/MatMul pattern", "through only BatchNormalization",
          model_path=tmp_path / "add.onnx")
    # A Reshape that is not a flatten (it keeps the channel axis with a 0 entry).
    b = Builder(4)
    x = b.op("Relu", [b.conv("x", 3, 4, name="c")])
    x = b.op("Reshape", [x, b.const("s", np.array([0, 4, 36], np.int64))])
    x = b.op("Reshape", [x, b.const("s2", np.array([0, 144], np.int64))])
    bad = b.model(b.gemm(x, 144, 3, name="fc"), [1, 3, 6, 6])
    onnx.save(bad, tmp_path / "reshape.onnx")
    fails(["--channels", 2], 4, "pattern", model_path=tmp_path / "reshape.onnx")
    # Truncated, corrupted and empty model files.
    raw = src.read_bytes()
    fails(["--channels", 2], 2, "trunc.onnx", model_path=_write(tmp_path / "trunc.onnx", raw[: len(raw) // 2]))
    fails(["--channels", 2], 2, "empty.onnx", model_path=_write(tmp_path / "empty.onnx", b""))
    fails(["--channels", 2], 2, "junk.onnx", model_path=_write(tmp_path / "junk.onnx", b"\xff" * 64 + raw[64:]))
    # External data: missing, truncated, outside the model's folder.
    ext = tmp_path / "ext"
    ext.mkdir()
    onnx.save(m, ext / "e.onnx", save_as_external_data=True, all_tensors_to_one_file=True, location="e.data",
              size_threshold=0)
    data = (ext / "e.data").read_bytes()
    (ext / "e.data").write_bytes(data[: len(data) // 2])
    fails(["--channels", 2], 2, "e.data", model_path=ext / "e.onnx")
    (ext / "e.data").unlink()
    fails(["--channels", 2], 3, "e.data", model_path=ext / "e.onnx")
    em = onnx.load(ext / "e.onnx", load_external_data=False)
    for t in em.graph.initializer:
        for kv in t.external_data:
            if kv.key == "location":
                kv.value = "../outside.data"
    onnx.save(em, ext / "out.onnx")
    fails(["--channels", 2], 2, "'..'", model_path=ext / "out.onnx")


def test_data_init_against_numpy(tmp_path):
    """--init data: A = V_r^T Sigma^-1/2 and B = M Sigma^1/2 V_r from the SVD of M Sigma^1/2, Sigma the
    second moment of the flatten's input channels over positions and samples (here from onnxruntime),
    with eigenvalues below 1e-6 of the largest raised to it in Sigma^-1/2."""
    m = model(dropout=False)
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (40, 3, 6, 6), dtype=np.uint8)
    np.save(tmp_path / "x.npy", images)
    np.save(tmp_path / "y.npy", rng.integers(0, 5, 40).astype(np.int64))
    rank = 3
    report, s = sparsify(tmp_path, m, "--channels", rank, "--init", "data", "--data", tmp_path / "x.npy", "--labels",
                         tmp_path / "y.npy", "--mean", "0.5", "--std", "0.25", "--batches", 3, "--batch-size", 8)
    assert report["data"]["samples"] == 24 and report["data"]["batches"] == 3
    # Sigma from onnxruntime: the flatten's input as an extra output.
    flat = next(n for n in m.graph.node if n.op_type == "Flatten")
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    probe.graph.output.append(helper.make_tensor_value_info(flat.input[0], onnx.TensorProto.FLOAT, None))
    x = ((images[:24].astype(np.float32) / 255 - 0.5) / 0.25).astype(np.float32)
    acts = np.concatenate([ort_run(probe, {"x": x[i:i + 2]})[0][1] for i in range(0, 24, 2)]).astype(np.float64)
    X = acts.transpose(1, 0, 2, 3).reshape(C, -1)
    sigma = X @ X.T / X.shape[1]
    lam, q = np.linalg.eigh(sigma)
    lam = np.maximum(lam, 0)
    root = q @ np.diag(np.sqrt(lam)) @ q.T
    inv_root = q @ np.diag(1 / np.sqrt(np.maximum(lam, lam.max() * 1e-6))) @ q.T
    M = dense_weight(m).reshape(O, C, H * W).transpose(0, 2, 1).reshape(O * H * W, C)
    _, _, vt = np.linalg.svd(M @ root, full_matrices=False)
    expected = M @ root @ vt[:rank].T @ vt[:rank] @ inv_root
    a, fcw = factors(s, "channel")
    B = fcw.reshape(O, rank, H * W).transpose(0, 2, 1).reshape(O * H * W, rank)
    got = B @ a.reshape(rank, C)
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4 * np.abs(expected).max())
    out_err = np.linalg.norm((M - expected) @ root) / np.linalg.norm(M @ root)
    assert report["init_relative_output_error"] == pytest.approx(out_err, rel=1e-3)
    # Its expected output error is at most the weight-optimal SVD's under the same Sigma.
    u, sv, vt2 = np.linalg.svd(M, full_matrices=False)
    svd_best = (u[:, :rank] * sv[:rank]) @ vt2[:rank]
    assert out_err <= np.linalg.norm((M - svd_best) @ root) / np.linalg.norm(M @ root) + 1e-9
    # The data options go with --init data only.
    p = run("sparsify-fcl", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "--channels", 2, "--init", "data", check=False)
    assert p.returncode == 1 and "needs training data" in p.stderr
    p = run("sparsify-fcl", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "--channels", 2, "--data", tmp_path / "x.npy",
            "--mean", "0.5", "--std", "0.25", check=False)
    assert p.returncode == 1 and "--init data" in p.stderr


def test_engine_runs_the_sparse_layer_as_one_op_and_trains_it_as_the_unfused_graph(tmp_path):
    """dist-train fuses Conv 1x1 -> Flatten -> Gemm into the sparse FCL op (ops/sparse_fcl.h) and
    trains it as it trains the same graph with an Identity between Flatten and Gemm (not fused):
    same weights after 4 SGD steps."""
    m = model(dropout=False)
    _, s = sparsify(tmp_path, m, "--channels", 3)
    unfused = onnx.ModelProto()
    unfused.CopyFrom(s)
    flat = next(n for n in unfused.graph.node if n.op_type == "Flatten")
    fc = next(n for n in unfused.graph.node if n.name == "fc1")
    ident = helper.make_node("Identity", [flat.output[0]], ["flat_copy"], name="copy")
    fc.input[0] = "flat_copy"
    unfused.graph.node.insert(list(unfused.graph.node).index(fc), ident)
    onnx.save(unfused, tmp_path / "unfused.onnx")
    rng = np.random.default_rng(3)
    np.save(tmp_path / "x.npy", rng.integers(0, 256, (64, 3, 6, 6), dtype=np.uint8))
    np.save(tmp_path / "y.npy", rng.integers(0, 5, 64).astype(np.int64))
    trained = {}
    for name in ("s", "unfused"):
        cfg = {"model": str(tmp_path / f"{name}.onnx"), "output": str(tmp_path / f"{name}.trained.onnx"),
               "data": {"train_images": str(tmp_path / "x.npy"), "train_labels": str(tmp_path / "y.npy")},
               "augmentation": {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}, "epochs": 1, "batch_size": 16,
               "optimizer": {"type": "sgd", "momentum": 0.9}, "lr": {"base": 0.05, "base_batch": 16},
               "threads": 1, "seed": 2, "deterministic": True}
        (tmp_path / f"{name}.json").write_text(json.dumps(cfg))
        p = subprocess.run([tool("dist-train"), "--config", tmp_path / f"{name}.json"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        assert ("SparseFcl x1" in p.stderr) == (name == "s"), p.stderr
        trained[name] = weights_of(onnx.load(tmp_path / f"{name}.trained.onnx"))
    for k, v in trained["s"].items():
        np.testing.assert_allclose(v, trained["unfused"][k], rtol=1e-4, atol=1e-5, err_msg=k)
    assert not np.allclose(trained["s"]["fc1.weight"], weights_of(s)["fc1.weight"])  # it did train


def test_shared_or_exposed_values_are_refused_and_constant_weights_work(tmp_path):
    """Found by a break-it pass: a weight that another node (or a graph output) reads, and values of
    the flatten path that are graph outputs, would change under the rewrite: exit 4, no output. A
    weight given as a Constant node is rewritten in place."""
    out = tmp_path / "o.onnx"
    base = model(dropout=False)
    # The FC weight also read by ReduceSum.
    m = onnx.ModelProto()
    m.CopyFrom(base)
    m.graph.node.append(helper.make_node("ReduceSum", ["fc1.weight"], ["wsum"], keepdims=0))
    m.graph.output.append(helper.make_tensor_value_info("wsum", onnx.TensorProto.FLOAT, None))
    # The flatten output as a graph output.
    m2 = onnx.ModelProto()
    m2.CopyFrom(base)
    flat = next(n for n in m2.graph.node if n.op_type == "Flatten")
    m2.graph.output.append(helper.make_tensor_value_info(flat.output[0], onnx.TensorProto.FLOAT, None))
    for name, mm, word in (("shared.onnx", m, "shares its weight"), ("exposed.onnx", m2, "is a graph output")):
        onnx.save(mm, tmp_path / name)
        p = run("sparsify-fcl", tmp_path / name, "-o", out, "--channels", 2, check=False)
        assert p.returncode == 4 and word in p.stderr, p.stderr
        assert not out.exists()
    # The weight as a Constant node.
    m3 = onnx.ModelProto()
    m3.CopyFrom(base)
    w = next(t for t in m3.graph.initializer if t.name == "fc1.weight")
    const = helper.make_node("Constant", [], ["fc1.weight"], value=w)
    m3.graph.initializer.remove(w)
    m3.graph.node.insert(0, const)
    report, s = sparsify(tmp_path, m3, "--channels", C, "--allow-full-rank")
    onnx.checker.check_model(s, full_check=True)
    (a,), feeds = ort_run(m3)
    (b,), _ = ort_run(s, feeds)
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * np.abs(a).max())


def test_corrupt_unrelated_tensor_input_external_data_and_report_failures(tmp_path):
    out = tmp_path / "o.onnx"
    # An unrelated initializer with too few bytes: bad input (exit 2), naming it.
    m = model()
    t = next(t for t in m.graph.initializer if t.name == "conv.weight")
    t.raw_data = numpy_helper.to_array(t).tobytes()[:40]
    onnx.save(m, tmp_path / "short.onnx", )
    p = run("sparsify-fcl", tmp_path / "short.onnx", "-o", out, "--channels", 2, check=False)
    assert p.returncode == 2 and "conv.weight" in p.stderr, p.stderr
    assert not out.exists()
    # The input keeps its weights in the file the output's data file would be: refused, input intact.
    d = tmp_path / "ext"
    d.mkdir()
    onnx.save(model(), d / "in.onnx", save_as_external_data=True, all_tensors_to_one_file=True, location="o.onnx.data",
              size_threshold=0)
    before = (d / "o.onnx.data").read_bytes()
    for t in ("sparsify-fcl", "prune-rate"):
        args = ["--channels", 2] if t == "sparsify-fcl" else ["--threshold", "0.01"]
        p = run(t, d / "in.onnx", "-o", d / "o.onnx", "-f", *args, check=False)
        assert p.returncode == 1 and "external data file" in p.stderr, p.stderr
        assert (d / "o.onnx.data").read_bytes() == before and not (d / "o.onnx").exists()
    # A report that cannot be written: no model is left either.
    onnx.save(model(), tmp_path / "m.onnx")
    p = run("sparsify-fcl", tmp_path / "m.onnx", "-o", out, "--channels", 2, "--report", tmp_path / ("x" * 300 + ".json"),
            check=False)
    assert p.returncode == 3 and not out.exists(), p.stderr
