"""sparsify-fcl (Matsumura et al., CCPE 2021) on 5-D (NCDHW) models of the CosmoFlow family: the first
Dense after the last Conv 3-D reads C channels x P = D*H*W positions. The rewrite is checked as the 2-D
one is (tests/cli/test_sparsify_fcl.py): at full rank onnxruntime gives the dense model's output; below
it the factors are NumPy's truncated SVD of M[(o, s), c] = W[o, c*P + s] (channel structure, a
1x1x1 Conv 3-D) or of each channel's O x P block (spatial structure, a D x H x W Conv 3-D with group C);
parameters against the layer's formula and an independent count; and what is refused."""
import os

import numpy as np
import onnx
import pytest
from onnx import helper

from hpcnn_test import count_params, ort_run, run, weights_of
from test_prune_3d import CIN, N, S, Builder3d
from test_sparsify_fcl import dense_weight, factors, sparsify

C, D, O = 6, 2, 10  # channels of the last conv, its map D x D x D before the flatten, fc1 outputs
P = D ** 3
TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "nn", "cosmoflow_tiny", "model.onnx")


def model(fc="gemm_t", flatten="flatten", bn=False, seed=41):
    """[2, 4, 8, 8, 8] -> conv (k 3, 4 -> 4) -> pool -> conv (k 2, 4 -> 6) -> (BN) -> pool -> [2, 6, 2, 2, 2]
    -> flatten (48) -> Dropout -> fc1 (10) -> LeakyRelu -> fc2 (4) -> Tanh -> Mul 1.2."""
    b = Builder3d(seed)
    x = b.block("x", CIN, 4, 3, "conv1")
    x = b.block(x, 4, C, 2, "conv", bn)
    x = b.op("Flatten", [x]) if flatten == "flatten" else b.op("Reshape", [x, b.const("flat", np.array(flatten, np.int64))])
    x = b.op("Dropout", [x])
    if fc == "matmul":
        x = b.matmul(x, C * P, O, name="fc1")
    else:
        x = b.gemm(x, C * P, O, trans_b=1 if fc == "gemm_t" else 0, name="fc1")
    x = b.op("Tanh", [b.gemm(b.op("LeakyRelu", [x], alpha=0.3), O, 4, name="fc2")])
    return b.model(b.op("Mul", [x, b.const("scale", np.array(1.2, np.float32))]), [N, CIN, S, S, S])


def same_output(m, s):
    (a,), feeds = ort_run(m)
    (b,), _ = ort_run(s, feeds)
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * np.abs(a).max())


def reduction(s):
    return next(n for n in s.graph.node if n.op_type == "Conv" and n.name.startswith("fc1."))


@pytest.mark.parametrize("fc,flatten", [("gemm_t", "flatten"), ("gemm", [N, C * P]), ("matmul", [N, -1])])
def test_full_rank_reproduces_the_dense_3d_model(tmp_path, fc, flatten):
    m = model(fc, flatten, bn=True)
    report, s = sparsify(tmp_path, m, "--channels", C, "--allow-full-rank")
    onnx.checker.check_model(s, full_check=True)
    assert report["rank"] == C and report["init_relative_error"] < 1e-12
    assert {k: report["layer"][k] for k in ("channels", "depth", "height", "width", "outputs")} == \
        {"channels": C, "depth": D, "height": D, "width": D, "outputs": O}
    assert report["layer"]["last_conv"] == "conv"
    red = reduction(s)
    assert helper.get_attribute_value(next(a for a in red.attribute if a.name == "kernel_shape")) == [1, 1, 1]
    same_output(m, s)
    if flatten != "flatten":
        assert weights_of(s)[next(n for n in s.graph.node if n.op_type == "Reshape").input[1]].tolist() == \
            ([N, C * P] if flatten[1] > 0 else [N, -1])


def test_spatial_full_rank_reproduces_the_dense_3d_model(tmp_path):
    m = model()
    report, s = sparsify(tmp_path, m, "--structure", "spatial", "--spatial-width", P, "--allow-full-rank")
    onnx.checker.check_model(s, full_check=True)
    red = reduction(s)
    attrs = {a.name: helper.get_attribute_value(a) for a in red.attribute}
    assert attrs["group"] == C and attrs["kernel_shape"] == [D, D, D]
    same_output(m, s)


@pytest.mark.parametrize("rank", [1, 3])
def test_channel_svd_3d_is_the_best_rank_r_approximation(tmp_path, rank):
    m = model()
    report, s = sparsify(tmp_path, m, "--channels", rank)
    onnx.checker.check_model(s, full_check=True)
    Wd = dense_weight(m)
    M = Wd.reshape(O, C, P).transpose(0, 2, 1).reshape(O * P, C)  # M[(o, s), c], s over the D*H*W positions
    u, sv, vt = np.linalg.svd(M, full_matrices=False)
    best = (u[:, :rank] * sv[:rank]) @ vt[:rank]
    a, fcw = factors(s, "channel")
    assert a.shape == (rank, C, 1, 1, 1) and fcw.shape == (O, rank * P)
    B = fcw.reshape(O, rank, P).transpose(0, 2, 1).reshape(O * P, rank)
    np.testing.assert_allclose(B @ a.reshape(rank, C), best, rtol=1e-5, atol=1e-6)
    assert report["init_relative_error"] == pytest.approx(np.sqrt((sv[rank:] ** 2).sum() / (sv ** 2).sum()), rel=1e-6)
    assert report["layer_params_before"] == O * C * P + O
    assert report["layer_params_after"] == rank * C + rank + O * rank * P + O
    assert report["layer_macs_before"] == O * C * P and report["layer_macs_after"] == rank * C * P + O * rank * P
    assert report["params_before"] == count_params(m) and report["params_after"] == count_params(s)
    assert count_params(m) - count_params(s) == report["layer_params_before"] - report["layer_params_after"]
    (out,), _ = ort_run(s)
    assert out.shape == (N, 4)


def test_spatial_svd_3d_per_channel(tmp_path):
    k = 3
    m = model()
    report, s = sparsify(tmp_path, m, "--structure", "spatial", "--spatial-width", k)
    onnx.checker.check_model(s, full_check=True)
    Wd = dense_weight(m).reshape(O, C, P)
    q = weights_of(s)[reduction(s).input[1]]
    assert q.shape == (C * k, 1, D, D, D)
    q = q.astype(np.float64).reshape(C, k, P)
    p = dense_weight(s).reshape(O, C, k)
    err2 = 0.0
    for c in range(C):
        u, sv, vt = np.linalg.svd(Wd[:, c, :], full_matrices=False)
        np.testing.assert_allclose(p[:, c, :] @ q[c], (u[:, :k] * sv[:k]) @ vt[:k], rtol=1e-5, atol=1e-6)
        err2 += (sv[k:] ** 2).sum()
    assert report["init_relative_error"] == pytest.approx(np.sqrt(err2 / (Wd ** 2).sum()), rel=1e-6)
    assert report["layer_params_after"] == C * k * P + C * k + O * C * k + O == count_params(s) - count_params(m) + O * C * P + O


def test_cosmoflow_tiny_fixture(tmp_path):
    """The committed fixture (tests/data/nn/cosmoflow_tiny: 16 channels x 2^3 into 32): full rank
    reproduces it, and --compression picks the largest rank that reaches it."""
    m = onnx.load(TINY)
    report, s = sparsify(tmp_path, m, "--channels", 16, "--allow-full-rank")
    same_output(m, s)
    report, s = sparsify(tmp_path, m, "--compression", 3)
    dense = 32 * 16 * 8 + 32
    r = report["rank"]
    def sparse(r):
        return r * 16 + r + 32 * r * 8 + 32
    assert dense / sparse(r) >= 3 > dense / sparse(r + 1), r
    assert report["layer_params_after"] == sparse(r) and report["params_after"] == count_params(s)


def test_global_pooling_3d_and_refusals(tmp_path):
    """After GlobalAveragePool on 5-D the map is 1x1x1: the channel structure is a rank-r
    factorisation of the FC (full rank reproduces the model), the spatial one is refused (exit 1);
    --init data measures 5-D feature maps (full rank reproduces the model)."""
    b = Builder3d(7)
    g = b.op("Flatten", [b.op("GlobalAveragePool", [b.block("x", CIN, C, 3, "conv")])])
    m = b.model(b.gemm(b.op("Relu", [b.gemm(g, C, 5, name="fc1")]), 5, 3, name="fc2"), [N, CIN, S, S, S])
    report, s = sparsify(tmp_path, m, "--channels", C, "--allow-full-rank")
    assert (report["layer"]["depth"], report["layer"]["height"], report["layer"]["width"]) == (1, 1, 1)
    same_output(m, s)
    p = sparsify(tmp_path, m, "--structure", "spatial", "--spatial-width", 1, check=False)
    assert p.returncode == 1 and "1x1x1 (global pooling)" in p.stderr, p.stderr
    vols = np.random.default_rng(0).integers(0, 255, (4, CIN, S, S, S), dtype=np.uint8)
    np.save(tmp_path / "x.npy", vols)
    np.save(tmp_path / "y.npy", np.zeros(4, np.int64))
    (tmp_path / "s.onnx").unlink()
    # --init data measures the channels' second moment over the D*H*W positions of the 5-D map:
    # at full rank the data-aware factorisation reproduces the model too.
    m3 = model()
    report, s = sparsify(tmp_path, m3, "--channels", C, "--allow-full-rank", "--init", "data", "--data", tmp_path / "x.npy",
                         "--labels", tmp_path / "y.npy", "--mean", "0.5", "--std", "0.25", "--batches", 1, "--batch-size", 4)
    same_output(m3, s)
    assert report["init"] == "data", report


def test_corrupt_3d_inputs(tmp_path):
    """A 5-D conv weight with too few bytes, a truncated 3-D model: exit 2, naming them, no output."""
    out = tmp_path / "o.onnx"
    m = model()
    t = next(t for t in m.graph.initializer if t.name == "conv.weight")
    t.raw_data = t.raw_data[:-4]
    onnx.save(m, tmp_path / "short.onnx")
    p = run("sparsify-fcl", tmp_path / "short.onnx", "-o", out, "--channels", 2, check=False)
    assert p.returncode == 2 and "conv.weight" in p.stderr, p.stderr
    data = model().SerializeToString()
    (tmp_path / "cut.onnx").write_bytes(data[:len(data) // 2])
    p = run("sparsify-fcl", tmp_path / "cut.onnx", "-o", out, "--channels", 2, check=False)
    assert p.returncode == 2 and "cut.onnx" in p.stderr, p.stderr
    assert not out.exists()
