"""prune-rate on 5-D (NCDHW) models of the CosmoFlow family: Conv 3-D (SAME pads, kernels 3 and 2)
-> (BatchNormalization on 5-D) -> LeakyRelu(0.3) -> MaxPool 3-D 2, then Flatten (or a Reshape to
[N, C*D*H*W]) -> Gemm -> ... -> Tanh -> Mul 1.2. The filter norms are the L1 norms over the whole
C_in x kD x kH x kW kernel, computed here with numpy (Sakai et al., ICPR 2022); each removed channel
of the last Conv removes its D*H*W consecutive input columns of the first Gemm. The written model is
checked with onnx.checker, its shapes and parameter count against a count made here from the kept
channels, and with onnxruntime: it computes what the original computes with the removed filters zeroed.
Also the reference network itself (configs/cosmoflow/make_models.py, 32^3), what is refused on 5-D
tensors, and corrupt 3-D inputs."""
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

from hpcnn_test import (Builder, assert_close, count_macs, count_params, ort_run, prune, run, set_weight,
                        weights_of)
from test_prune_small import expected_group, l1, zero_removed

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "cosmoflow", "make_models.py")
N, CIN, S = 2, 4, 8  # batch, input channels, input size S^3
C1, C2, FC1, OUT = 8, 12, 16, 4


class Builder3d(Builder):
    def conv3d(self, x, cin, cout, k, name):
        """Conv 3-D with SAME_UPPER pads written out (begin (k-1)//2, end k-1-(k-1)//2), as make_models.py does."""
        w = self.const(name + ".weight", self.weight((cout, cin, k, k, k)))
        b = self.const(name + ".bias", (self.rng.standard_normal(cout) * 0.1).astype(np.float32))
        pads = [(k - 1) // 2] * 3 + [k - 1 - (k - 1) // 2] * 3
        return self.add_node("Conv", [x, w, b], [name], name=name, kernel_shape=[k] * 3, pads=pads)

    def block(self, x, cin, cout, k, name, bn=False):
        y = self.conv3d(x, cin, cout, k, name)
        if bn:
            y = self.bn(y, cout)
        y = self.op("LeakyRelu", [y], alpha=0.3)
        return self.op("MaxPool", [y], kernel_shape=[2, 2, 2], strides=[2, 2, 2])


def tiny(bn=False, flatten="flatten", seed=31):
    """[2, 4, 8, 8, 8] -> c1 (k 3, 4 -> 8) -> c2 (k 2, 8 -> 12) -> [2, 12, 2, 2, 2] -> flatten (96) ->
    fc1 (16) -> LeakyRelu -> Dropout -> fc2 (4) -> Tanh -> Mul 1.2."""
    b = Builder3d(seed)
    x = b.block("x", CIN, C1, 3, "c1", bn)
    x = b.block(x, C1, C2, 2, "c2", bn)
    if flatten == "flatten":
        x = b.op("Flatten", [x])
    else:
        x = b.op("Reshape", [x, b.const("flat_shape", np.array(flatten, np.int64))])
    x = b.op("Dropout", [b.op("LeakyRelu", [b.gemm(x, C2 * 8, FC1, name="fc1")], alpha=0.3)])
    x = b.op("Tanh", [b.gemm(x, FC1, OUT, name="fc2")])
    model = b.model(b.op("Mul", [x, b.const("scale", np.array(1.2, np.float32))]), [N, CIN, S, S, S])
    # fc2 scaled down so that the Tanh does not saturate: the output still shows every change upstream.
    set_weight(model, "fc2.weight", weights_of(model)["fc2.weight"] * 0.02)
    return model


def tiny_params(k1, k2, f1, bn=False):
    """Parameters (float constants) of the tiny model with k1, k2 filters and f1 fc1 neurons kept."""
    conv = 27 * CIN * k1 + k1 + 8 * k1 * k2 + k2 + (4 * (k1 + k2) if bn else 0)
    return conv + (k2 * 8 + 1) * f1 + (f1 + 1) * OUT + 1  # + the 1.2 scale


def threshold_between(model, layer, lo=0.5, hi=0.6):
    """A threshold halfway between the layer's pruning errors at rates lo and hi (away from rounding at the boundary)."""
    W = weights_of(model)
    w = W[layer + ".weight"]
    score = np.sort(l1(w, 0))
    errs = [score[:int(np.floor(r * len(score) + 0.5))].sum() / w.size for r in (lo, hi)]
    return (errs[0] + errs[1]) / 2


def check_against_definition(model, report, threshold):
    """Every prunable layer's rate, error and removed filters from the definition (one layer per group here)."""
    for L in report["layers"]:
        if not L["prunable"]:
            assert L["removed_channels"] == [] and L["kept_channels"] == L["channels"], L
            continue
        rate, err, removed = expected_group(model, [L], threshold)
        assert L["rate"] == pytest.approx(rate), L["name"]
        assert L["pruning_error"] == pytest.approx(err, rel=1e-9, abs=1e-12), L["name"]
        assert L["removed_channels"] == removed, L["name"]


def check_runs_as_zeroed(model, dst, report):
    pruned = onnx.load(dst)
    onnx.checker.check_model(pruned, full_check=True)
    (ref,), feeds = ort_run(zero_removed(model, report))
    (out,), _ = ort_run(str(dst), feeds)
    assert out.shape == ref.shape
    assert_close(out, ref)
    return pruned


@pytest.mark.parametrize("variant", ["flatten", "bn", "reshape", "reshape_minus1"])
def test_3d_filters_pruned_and_followed_into_the_gemm(variant, tmp_path):
    bn = variant == "bn"
    flatten = {"reshape": [N, C2 * 8], "reshape_minus1": [N, -1]}.get(variant, "flatten")
    model = tiny(bn, flatten)
    src, dst = tmp_path / "m.onnx", tmp_path / "p.onnx"
    onnx.save(model, src)
    threshold = threshold_between(model, "c2")
    report = prune(src, dst, "--threshold", repr(float(threshold)))
    kept = {L["name"]: L["kept_channels"] for L in report["layers"]}
    assert kept["c2"] == C2 - 6, report["layers"]  # rate 0.5 of 12 filters
    assert {L["name"] for L in report["layers"] if L["prunable"]} == {"c1", "c2", "fc1"}
    fc2 = next(L for L in report["layers"] if L["name"] == "fc2")
    assert "graph output" in fc2["reason"]
    check_against_definition(model, report, threshold)
    pruned = check_runs_as_zeroed(model, dst, report)
    # Physically smaller: every shape from the kept channels, fc1 keeps D*H*W = 8 columns per kept c2 filter.
    k1, k2, f1 = kept["c1"], kept["c2"], kept["fc1"]
    W = weights_of(pruned)
    assert W["c1.weight"].shape == (k1, CIN, 3, 3, 3) and W["c2.weight"].shape == (k2, k1, 2, 2, 2)
    assert W["fc1.weight"].shape == (f1, k2 * 8) and W["fc2.weight"].shape == (OUT, f1)
    keep2 = [c for c in range(C2) if c not in next(L for L in report["layers"] if L["name"] == "c2")["removed_channels"]]
    cols = [c * 8 + s for c in keep2 for s in range(8)]
    fc1_rows = [i for i in range(FC1) if i not in next(L for L in report["layers"] if L["name"] == "fc1")["removed_channels"]]
    np.testing.assert_array_equal(W["fc1.weight"], weights_of(model)["fc1.weight"][np.ix_(fc1_rows, cols)])
    if bn:
        bn_params = [n.input[1:] for n in pruned.graph.node if n.op_type == "BatchNormalization"]
        assert [[W[p].shape for p in ps] for ps in bn_params] == [[(k1,)] * 4, [(k2,)] * 4]
    if variant == "reshape":
        assert W["flat_shape"].tolist() == [N, k2 * 8]
    elif variant == "reshape_minus1":
        assert W["flat_shape"].tolist() == [N, -1]
    t = report["totals"]
    assert t["params_before"] == count_params(model) == tiny_params(C1, C2, FC1, bn)
    assert t["params_after"] == count_params(pruned) == tiny_params(k1, k2, f1, bn) < t["params_before"]
    assert t["macs_before"] == count_macs(model) and t["macs_after"] == count_macs(pruned)


def test_3d_threshold_zero_changes_nothing(tmp_path):
    model = tiny(bn=True)
    onnx.save(model, tmp_path / "m.onnx")
    report = prune(tmp_path / "m.onnx", tmp_path / "p.onnx", "--threshold", "0")
    assert all(L["kept_channels"] == L["channels"] for L in report["layers"])
    (a,), feeds = ort_run(model)
    (b,), _ = ort_run(str(tmp_path / "p.onnx"), feeds)
    np.testing.assert_array_equal(a, b)


def reference_params(kept, k, L):
    """The CosmoFlow reference network's parameters (make_models.py's closed form) with `kept`
    channels per layer (conv1..convL, fc1, fc2), fc3's 4 outputs, the 4^3 map before the flatten,
    and the two float constants (Dropout ratio, the 1.2 scale)."""
    c = [4] + [kept[f"conv{i}"] for i in range(1, L + 1)]
    conv = sum(k ** 3 * c[i - 1] * c[i] + c[i] for i in range(1, L + 1))
    return conv + (64 * c[L] + 1) * kept["fc1"] + (kept["fc1"] + 1) * kept["fc2"] + (kept["fc2"] + 1) * 4 + 2


@pytest.mark.parametrize("k", [3, 2])
def test_cosmoflow_reference_network_32(k, tmp_path):
    """The 32^3 reference network (3 blocks, 32/64/128 filters, fc1 reads 128 x 4^3): a threshold
    that prunes conv3 by half (its Keras-default weights have near-equal norms, so the other layers
    go far too); every layer's removed filters from the definition, the parameter count from the
    closed form at the kept channels, and the output against onnxruntime on the zeroed original."""
    p = subprocess.run([sys.executable, SCRIPT, str(tmp_path), "--sizes", "32", "--kernels", str(k)], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    src, dst = tmp_path / f"cosmoflow_32_k{k}.onnx", tmp_path / "p.onnx"
    model = onnx.load(src)
    threshold = threshold_between(model, "conv3", 0.4, 0.5)
    report = prune(src, dst, "--threshold", repr(float(threshold)))
    kept = {L["name"]: L["kept_channels"] for L in report["layers"]}
    assert kept["conv3"] == 128 - 51 and kept["fc3"] == 4, kept
    check_against_definition(model, report, threshold)
    pruned = check_runs_as_zeroed(model, dst, report)
    assert weights_of(pruned)["fc1.weight"].shape == (kept["fc1"], kept["conv3"] * 64)
    t = report["totals"]
    full = {"conv1": 32, "conv2": 64, "conv3": 128, "fc1": 128, "fc2": 64}
    assert t["params_before"] == count_params(model) == reference_params(full, k, 3)
    assert t["params_after"] == count_params(pruned) == reference_params(kept, k, 3)
    assert t["macs_after"] == count_macs(pruned)


def test_5d_flows_that_cannot_be_followed_are_reported(tmp_path):
    """Refused on 5-D as on 4-D: a Transpose of the volume, a Reshape that is not a flatten to
    [N, C*D*H*W] (here to [N, C, D*H*W]), channels that reach a graph output."""
    b = Builder3d(5)
    x = b.block("x", CIN, C1, 3, "c1")
    t = b.op("Transpose", [x], perm=[0, 1, 4, 3, 2])
    y = b.block(t, C1, C2, 2, "c2")
    y = b.op("Reshape", [y, b.const("to3d", np.array([N, C2, 8], np.int64))])
    y = b.op("Flatten", [y])
    model = b.model(b.gemm(y, C2 * 8, OUT, name="fc"), [N, CIN, S, S, S])
    onnx.save(model, tmp_path / "m.onnx")
    report = prune(tmp_path / "m.onnx", tmp_path / "p.onnx", "--threshold", "1000")
    layers = {L["name"]: L for L in report["layers"]}
    for name, why in {"c1": "Transpose", "c2": "is not a flatten", "fc": "graph output"}.items():
        assert not layers[name]["prunable"] and why in layers[name]["reason"], layers[name]
    assert report["totals"]["prunable_groups"] == 0
    np.testing.assert_array_equal(ort_run(model)[0][0], ort_run(str(tmp_path / "p.onnx"))[0][0])


def test_corrupt_3d_weight_and_truncated_3d_model(tmp_path):
    model = tiny()
    next(t for t in model.graph.initializer if t.name == "c2.weight").raw_data = weights_of(model)["c2.weight"].tobytes()[:-4]
    onnx.save(model, tmp_path / "w.onnx")
    out = tmp_path / "out.onnx"
    p = run("prune-rate", tmp_path / "w.onnx", "--threshold", "0.1", "-o", out, check=False)
    assert p.returncode == 2 and p.stderr.startswith("prune-rate: error: ") and "c2.weight" in p.stderr, p.stderr
    data = tiny().SerializeToString()
    (tmp_path / "cut.onnx").write_bytes(data[:len(data) // 2])
    p = run("prune-rate", tmp_path / "cut.onnx", "--threshold", "0.1", "-o", out, check=False)
    assert p.returncode == 2 and "cut.onnx" in p.stderr, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["cut.onnx", "w.onnx"]
