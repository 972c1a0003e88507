"""prune-rate's data-driven thresholds (Sakai et al., ICPR 2022; JAIT 2022) against an independent
NumPy computation: the loss, the connection sensitivity S_l = mean over batches of
sum_i 1/|dL_b/dw_i| (computed here by a hand-written float64 forward and backward pass of the
model as it evaluates: BatchNormalization with running statistics), the thresholds
th_l = (L_before (1 + margin) - L) S_l / N_l, the bound U and its scaling, the derived rates and
the next bounds; and the same numbers from 2 ranks under mpirun."""
import json
import os
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hpcnn_test as H

MEAN, STD, EPS = 0.5, 0.25, 1e-5
K = 5  # classes


def make_model(path, seed=0):
    """x[N,1,8,8] -> Conv c1 (4, pad 1) -> BN (running stats) -> Relu -> Conv c2 (6, pad 1, bias) -> Relu
    -> GlobalAveragePool -> Flatten -> Gemm fc (K). Prunable: c1 (with BN) and c2 (fc's columns follow)."""
    rng = np.random.default_rng(seed)
    p = {
        "c1.w": rng.standard_normal((4, 1, 3, 3)) * 0.6,
        "bn.scale": rng.uniform(0.5, 1.5, 4), "bn.bias": rng.standard_normal(4) * 0.1,
        "bn.mean": rng.standard_normal(4) * 0.2, "bn.var": rng.uniform(0.5, 2.0, 4),
        "c2.w": rng.standard_normal((6, 4, 3, 3)) * 0.3, "c2.b": rng.standard_normal(6) * 0.1,
        "fc.w": rng.standard_normal((K, 6)), "fc.b": rng.standard_normal(K) * 0.1,
    }
    p = {k: v.astype(np.float32) for k, v in p.items()}
    nodes = [helper.make_node("Conv", ["x", "c1.w"], ["c1"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["b1"],
                              name="bn", epsilon=EPS),
             helper.make_node("Relu", ["b1"], ["r1"]),
             helper.make_node("Conv", ["r1", "c2.w", "c2.b"], ["c2"], name="c2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], name="fc", transB=1)]
    g = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", K])],
                          [numpy_helper.from_array(v, k) for k, v in p.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    return {k: v.astype(np.float64) for k, v in p.items()}


def make_data(tmp, n=20, seed=1):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 8, 8), dtype=np.uint8)
    labels = rng.integers(0, K, n).astype(np.int64)
    np.save(tmp / "x.npy", images)
    np.save(tmp / "y.npy", labels)
    return images, labels


# ---- a float64 reference: forward and backward of the model as it evaluates ----------------------
def patches(x):
    """[N,C,H,W] -> [N, C*9, H*W] of 3x3 windows with zero padding 1."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, :, i:i + h, j:j + w] for i in range(3) for j in range(3)], axis=2)  # N,C,9,H,W
    return cols.reshape(n, c * 9, h * w)


def conv(x, w, b=None):
    n, _, h, wd = x.shape
    y = np.einsum("ok,nkp->nop", w.reshape(w.shape[0], -1), patches(x)).reshape(n, w.shape[0], h, wd)
    return y if b is None else y + b[None, :, None, None]


def conv_backward(x, w, gy):
    n, c, h, wd = x.shape
    o = w.shape[0]
    g = gy.reshape(n, o, h * wd)
    gw = np.einsum("nop,nkp->ok", g, patches(x)).reshape(w.shape)
    gcols = np.einsum("ok,nop->nkp", w.reshape(o, -1), g).reshape(n, c, 3, 3, h, wd)
    gxp = np.zeros((n, c, h + 2, wd + 2))
    for i in range(3):
        for j in range(3):
            gxp[:, :, i:i + h, j:j + wd] += gcols[:, :, i, j]
    return gw, gxp[:, :, 1:-1, 1:-1]


def loss_and_grads(p, x, labels):
    a = p["bn.scale"] / np.sqrt(p["bn.var"] + EPS)
    c1 = conv(x, p["c1.w"])
    b1 = a[None, :, None, None] * (c1 - p["bn.mean"][None, :, None, None]) + p["bn.bias"][None, :, None, None]
    r1 = np.maximum(b1, 0)
    c2 = conv(r1, p["c2.w"], p["c2.b"])
    r2 = np.maximum(c2, 0)
    f = r2.mean(axis=(2, 3))
    z = f @ p["fc.w"].T + p["fc.b"]
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    n = len(labels)
    loss = -logp[np.arange(n), labels].mean()
    gz = np.exp(logp)
    gz[np.arange(n), labels] -= 1
    gz /= n
    gf = gz @ p["fc.w"]
    gr2 = np.broadcast_to(gf[:, :, None, None] / (r2.shape[2] * r2.shape[3]), r2.shape)
    gc2 = gr2 * (c2 > 0)
    gw2, gr1 = conv_backward(r1, p["c2.w"], gc2)
    gb1 = gr1 * (b1 > 0)
    gw1, _ = conv_backward(x, p["c1.w"], gb1 * a[None, :, None, None])
    return loss, {"c1.w": gw1, "c2.w": gw2}


def inverse_sum(g):
    a = np.abs(g)
    return float(np.where(a == 0, 1e-7, 1.0 / np.where(a == 0, 1.0, a)).sum())


def reference(p, images, labels, batches, batch_size):
    x_all = ((images.astype(np.float64) / 255.0 - MEAN) / STD)[:, None]
    n = min(len(labels), batches * batch_size)
    nb = (n + batch_size - 1) // batch_size
    loss, s = 0.0, {"c1.w": 0.0, "c2.w": 0.0}
    for b in range(nb):
        sl = slice(b * batch_size, min(n, (b + 1) * batch_size))
        l, g = loss_and_grads(p, x_all[sl], labels[sl])
        loss += l
        for k in s:
            s[k] += inverse_sum(g[k])
    return loss / nb, {k: v / nb for k, v in s.items()}, nb


def pruning_errors(w, grid):
    """E(r) for each grid rate r (k = floor(r C + 0.5) smallest filter L1 norms / numel)."""
    l1 = np.sort(np.abs(w).reshape(w.shape[0], -1).sum(axis=1))
    c = w.shape[0]
    return {r: (int(np.floor(r * c + 0.5)), l1[:int(np.floor(r * c + 0.5))].sum() / w.size) for r in grid}


def data_args(tmp):
    return ["--data", tmp / "x.npy", "--labels", tmp / "y.npy", "--mean", MEAN, "--std", STD]


def by_name(report, key):
    return {l["name"]: l for l in report[key]} if key == "layers" else report[key]


@pytest.mark.parametrize("loss_before_factor,upper_bound", [(None, None), (1.3, None), (1.3, 1e-3)])
def test_thresholds_match_numpy(tmp_path, loss_before_factor, upper_bound):
    p = make_model(tmp_path / "m.onnx")
    images, labels = make_data(tmp_path)
    batches, batch_size, margin = 3, 6, 0.2
    L, S, nb = reference(p, images, labels, batches, batch_size)
    args = [tmp_path / "m.onnx", *data_args(tmp_path), "--batches", batches, "--batch-size", batch_size,
            "--margin", margin]
    L_before = L
    if loss_before_factor:
        L_before = L * loss_before_factor
        args += ["--loss-before", repr(float(L_before))]
    if upper_bound:
        args += ["--upper-bound", upper_bound]
    r = json.loads(H.run("prune-rate", *args).stdout)
    d = r["data_driven"]
    assert d["batches"] == nb == 3 and d["samples"] == 18
    assert d["loss"] == pytest.approx(L, rel=1e-5)
    assert d["loss_before"] == pytest.approx(L_before, rel=1e-5)
    layers = by_name(r, "layers")
    N = {"c1.w": 36, "c2.w": 216}
    th = {}
    for name, w in (("c1", "c1.w"), ("c2", "c2.w")):
        assert layers[name]["sensitivity"] == pytest.approx(S[w], rel=1e-4), name
        assert layers[name]["weight_elements"] == N[w]
        th[w] = (L_before * (1 + margin) - L) * S[w] / N[w]
    grid = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    E = {w: pruning_errors(p[w], grid) for w in th}
    limit = np.sqrt(2) * max(max(th.values()), max(E[w][0.5][1] for w in th))
    U = upper_bound or limit
    norm = np.sqrt(sum(t * t for t in th.values()))
    scale = U / norm if norm > U else 1.0
    assert d["upper_bound"]["limit"] == pytest.approx(limit, rel=1e-4)
    assert d["upper_bound"]["used"] == pytest.approx(U, rel=1e-4)
    assert d["upper_bound"]["scaled"] == (norm > U)
    q_inc, q_dec = [], []
    for name, w in (("c1", "c1.w"), ("c2", "c2.w")):
        g = [g for g in r["groups"] if g["layers"] == [name]][0]
        t = th[w] * scale
        assert g["raw_threshold"] == pytest.approx(th[w], rel=1e-4)
        assert g["threshold"] == pytest.approx(t, rel=1e-4)
        chosen = max(rr for rr in grid if E[w][rr][1] <= t and E[w][rr][0] < p[w].shape[0])
        assert g["rate"] == chosen, (name, t, E[w])
        k = E[w][chosen][0]
        assert g["kept_channels"] == p[w].shape[0] - k
        if k == 0:
            inc = dec = 0.0
        else:
            larger = [E[w][rr][1] - t for rr in grid if rr > chosen and k < E[w][rr][0] < p[w].shape[0]]
            inc = min(larger) if larger else 1e6
            dec = t - E[w][chosen][1] if t - E[w][chosen][1] > 0 else 1e6
        q_inc.append(1 + inc / t if t > 0 else 1.0)
        q_dec.append(1 - dec / t if t > 0 else 1.0)
    assert d["upper_bound"]["next_if_accepted"] == pytest.approx(min(U * max(2, min(q_inc)), limit), rel=1e-4)
    assert d["upper_bound"]["next_if_rejected"] == pytest.approx(min(U * min(0.5, max(q_dec)), limit), rel=1e-4)
    if upper_bound:
        assert d["upper_bound"]["scaled"], "the small bound must scale the thresholds down"


def test_keep_takes_a_layer_out_of_the_thresholds(tmp_path):
    """--keep c2: c2's group is fixed (never pruned, no threshold), and the bound U is that of the
    one group left (U_limit = sqrt(1) * max(th_c1, E_c1(r_max)))."""
    p = make_model(tmp_path / "m.onnx")
    images, labels = make_data(tmp_path)
    batches, batch_size, margin = 3, 6, 0.2
    L, S, _ = reference(p, images, labels, batches, batch_size)
    r = json.loads(H.run("prune-rate", tmp_path / "m.onnx", *data_args(tmp_path), "--batches", batches, "--batch-size",
                         batch_size, "--margin", margin, "--keep", "c2").stdout)
    c2 = [g for g in r["groups"] if g["layers"] == ["c2"]][0]
    assert not c2["prunable"] and "--keep c2" in c2["reason"] and c2["raw_threshold"] is None
    assert by_name(r, "layers")["c2"]["kept_channels"] == p["c2.w"].shape[0]
    th = (L * (1 + margin) - L) * S["c1.w"] / 36
    limit = max(th, pruning_errors(p["c1.w"], [0.0, 0.1, 0.2, 0.3, 0.4, 0.5])[0.5][1])
    assert r["data_driven"]["upper_bound"]["limit"] == pytest.approx(limit, rel=1e-4)
    c1 = [g for g in r["groups"] if g["layers"] == ["c1"]][0]
    assert c1["raw_threshold"] == pytest.approx(th, rel=1e-4)
    p2 = H.run("prune-rate", tmp_path / "m.onnx", *data_args(tmp_path), "--keep", "c3", check=False)
    assert p2.returncode == 1 and "--keep names 'c3'" in p2.stderr and "c1, c2" in p2.stderr


def test_two_ranks_give_the_one_rank_numbers(tmp_path):
    make_model(tmp_path / "m.onnx")
    make_data(tmp_path, n=40)
    args = [tmp_path / "m.onnx", *data_args(tmp_path), "--batches", 5, "--batch-size", 7, "--loss-before", 1.7]
    # The same threads per rank in both runs (a reduction's order may depend on the thread count).
    one = json.loads(H.run("prune-rate", *args, env=dict(os.environ, OMP_NUM_THREADS="1")).stdout)
    p = subprocess.run([*H.launch(2), H.tool("prune-rate"),
                        *map(str, args)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr
    two = json.loads(p.stdout)  # rank 0 alone prints the report
    assert two["data_driven"]["ranks"] == 2 and one["data_driven"]["ranks"] == 1
    assert two["data_driven"]["loss"] == pytest.approx(one["data_driven"]["loss"], rel=1e-6)
    for a, b in zip(one["layers"], two["layers"]):
        assert a["name"] == b["name"]
        assert b["sensitivity"] == pytest.approx(a["sensitivity"], rel=1e-6)
        assert (a["threshold"] is None) == (b["threshold"] is None)
        if a["threshold"] is not None:
            assert b["threshold"] == pytest.approx(a["threshold"], rel=1e-6)
        assert a["kept_channels"] == b["kept_channels"]
    for k in ("limit", "used", "next_if_accepted", "next_if_rejected"):
        assert two["data_driven"]["upper_bound"][k] == pytest.approx(one["data_driven"]["upper_bound"][k], rel=1e-6)


def test_written_model_matches_the_report_and_runs(tmp_path):
    make_model(tmp_path / "m.onnx")
    make_data(tmp_path)
    r = H.prune(tmp_path / "m.onnx", tmp_path / "p.onnx", *data_args(tmp_path), "--batches", 2, "--batch-size", 10)
    m = onnx.load(tmp_path / "p.onnx")
    onnx.checker.check_model(m, full_check=True)
    w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    layers = by_name(r, "layers")
    assert w["c1.w"].shape[0] == layers["c1"]["kept_channels"]
    assert w["c2.w"].shape[0] == layers["c2"]["kept_channels"]
    assert w["fc.w"].shape == (K, layers["c2"]["kept_channels"])
    (out,), _ = H.ort_run(str(tmp_path / "p.onnx"), {"x": np.zeros((2, 1, 8, 8), np.float32)})
    assert out.shape == (2, K)


def test_bad_data_options(tmp_path):
    make_model(tmp_path / "m.onnx")
    make_data(tmp_path)
    m = tmp_path / "m.onnx"
    cases = [
        ([*data_args(tmp_path), "--threshold", 0.1], 1, "exclude each other"),
        (["--loss-before", 1.0, "--threshold", 0.1], 1, "need training data"),
        (["--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy"], 1, "--mean and --std"),
        (["--data", tmp_path / "x.npy", "--mean", MEAN, "--std", STD], 2, "no labels"),
        ([*data_args(tmp_path), "--upper-bound", 0], 1, ""),
        ([*data_args(tmp_path), "--batches", 0], 1, ""),
    ]
    for args, code, text in cases:
        p = H.run("prune-rate", m, "-o", tmp_path / "o.onnx", *args, check=False)
        assert p.returncode == code, (args, p.stderr)
        assert text in p.stderr, (args, p.stderr)
        assert not (tmp_path / "o.onnx").exists()
    # Truncated and empty data files: bad input naming the file, no output.
    raw = (tmp_path / "x.npy").read_bytes()
    for name, data in (("trunc.npy", raw[: len(raw) // 2]), ("empty.npy", b"")):
        (tmp_path / name).write_bytes(data)
        p = H.run("prune-rate", m, "-o", tmp_path / "o.onnx", "--data", tmp_path / name, "--labels",
                  tmp_path / "y.npy", "--mean", MEAN, "--std", STD, check=False)
        assert p.returncode == 2, p.stderr
        assert name in p.stderr
        assert not (tmp_path / "o.onnx").exists()


def test_non_finite_pixels_and_the_validation_split(tmp_path):
    make_model(tmp_path / "m.onnx")
    images, labels = make_data(tmp_path)
    f = images.astype(np.float32) / 255
    f[3, 2, 2] = np.nan
    np.save(tmp_path / "nan.npy", f)
    p = H.run("prune-rate", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "--data", tmp_path / "nan.npy", "--labels",
              tmp_path / "y.npy", "--mean", MEAN, "--std", STD, check=False)
    assert p.returncode == 2 and "not finite" in p.stderr, p.stderr
    assert not (tmp_path / "o.onnx").exists()
    # --config: the validation split is held out (here all of the data: nothing left to read).
    cfg = {"data": {"train_images": str(tmp_path / "x.npy"), "train_labels": str(tmp_path / "y.npy"),
                    "validation_samples": len(labels)}, "augmentation": {"mean": [MEAN], "std": [STD]}}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    p = H.run("prune-rate", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "--config", tmp_path / "c.json", check=False)
    assert p.returncode == 1 and "validation_samples" in p.stderr, p.stderr
    cfg["data"]["validation_samples"] = 8  # 12 training samples left: 2 batches of 6
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    r = json.loads(H.run("prune-rate", tmp_path / "m.onnx", "--config", tmp_path / "c.json", "--batches", 5, "--batch-size",
                         6).stdout)
    assert r["data_driven"]["samples"] == 12 and r["data_driven"]["batches"] == 2
