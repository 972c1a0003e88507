"""prune-rate on small hand-built models, one per graph pattern. Expected rates, errors and
removed filters are computed here with numpy from the definition (Sakai et al., ICPR 2022);
the written model is checked with onnx.checker and against onnxruntime: it must compute what
the original computes with the removed filters zeroed."""
import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from hpcnn_test import (Builder, assert_close, count_macs, count_params, ort_run, prune, set_weight,
                        weights_of)

GRID = [i / 10 for i in range(10)]


def case_chain(trans_b=1, bias=True, weights_as="initializer"):
    b = Builder(1, weights_as)
    x = b.op("Relu", [b.bn(b.conv("x", 3, 8, name="c1", bias=bias), 8)])
    x = b.op("Relu", [b.conv(x, 8, 12, name="c2", bias=bias)])
    x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.op("Flatten", [x])
    x = b.op("Relu", [b.gemm(x, 12 * 4 * 4, 10, trans_b=trans_b, name="fc1")])
    out = b.gemm(x, 10, 5, trans_b=trans_b, name="fc2")
    return b.model(out, [1, 3, 8, 8]), [{"c1"}, {"c2"}, {"fc1"}], {"fc2": "graph output"}


def case_residual(op="Add"):
    b = Builder(2)
    x0 = b.op("Relu", [b.conv("x", 3, 8, name="stem")])
    y = b.op("Relu", [b.conv(x0, 8, 6, name="a")])
    y = b.conv(y, 6, 8, name="b")
    s = b.op(op, [x0, y])
    s = b.op("Relu", [s])
    z = b.conv(s, 8, 8, name="c")
    s2 = b.op(op, [s, z])
    g = b.op("Flatten", [b.op("GlobalAveragePool", [s2])])
    return b.model(b.gemm(g, 8, 4, name="fc"), [1, 3, 6, 6]), [{"stem", "b", "c"}, {"a"}], {"fc": "graph output"}


def case_concat():
    b = Builder(3)
    x = b.op("Relu", [b.conv("x", 3, 6, name="sq")])
    e1 = b.op("Relu", [b.conv(x, 6, 5, k=1, name="e1")])
    e3 = b.op("Relu", [b.conv(x, 6, 7, k=3, name="e3")])
    cat = b.op("Concat", [e1, e3], axis=1)
    y = b.op("Relu", [b.conv(cat, 12, 9, name="post")])
    g = b.op("Flatten", [b.op("GlobalAveragePool", [y])])
    return b.model(b.gemm(g, 9, 3, name="fc"), [1, 3, 6, 6]), [{"sq"}, {"e1"}, {"e3"}, {"post"}], {"fc": "graph output"}


def case_depthwise():
    b = Builder(4)
    x = b.op("Relu", [b.bn(b.conv("x", 3, 8, name="pw1"), 8)])
    x = b.op("Clip", [b.bn(b.conv(x, 8, 8, group=8, name="dw"), 8)], min=0.0, max=6.0)
    x = b.op("Relu", [b.conv(x, 8, 10, k=1, name="pw2")])
    g = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    return b.model(b.gemm(g, 10, 4, name="fc"), [1, 3, 6, 6], opset=10), [{"pw1", "dw"}, {"pw2"}], {"fc": "graph output"}


def case_matmul_reshape():
    b = Builder(5)
    x = b.op("Relu", [b.conv("x", 3, 6, name="c1")])
    shape = b.const("flat_shape", np.array([1, 6 * 5 * 5], dtype=np.int64))
    x = b.op("Reshape", [x, shape])
    h = b.matmul(x, 150, 16, name="mm1")
    h = b.op("Relu", [b.op("Add", [h, b.const("mm1.bias", np.linspace(-1, 1, 16).astype(np.float32))])])
    return b.model(b.matmul(h, 16, 3, name="mm2"), [1, 3, 5, 5]), [{"c1"}, {"mm1"}], {"mm2": "graph output"}


def case_ir3_inputs():
    b = Builder(6)
    x = b.op("Relu", [b.conv("x", 3, 8, name="c1")])
    x = b.op("Relu", [b.conv(x, 8, 8, name="c2")])
    g = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    return b.model(b.gemm(g, 8, 4, name="fc"), [1, 3, 6, 6], opset=7, ir=3, inits_as_inputs=True), [{"c1"}, {"c2"}], {}


def case_opset21():
    m, groups, fixed = case_chain()
    m.opset_import[0].version = 21
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m, groups, fixed


def case_transpose():
    b = Builder(7)
    x = b.op("Relu", [b.conv("x", 3, 8, name="c1")])
    t = b.op("Transpose", [x], perm=[0, 1, 3, 2])
    y = b.op("Relu", [b.conv(t, 8, 6, name="c2")])
    g = b.op("Flatten", [b.op("GlobalAveragePool", [y])])
    return b.model(b.gemm(g, 6, 3, name="fc"), [1, 3, 6, 6]), [{"c1"}, {"c2"}], {"c1": "Transpose"}


def case_scale_layer(via="unsqueeze"):
    """Conv -> BN -> Mul(scale) -> Add(shift) -> Relu -> Conv, the per-channel scale and shift
    computed from constants [C] (Unsqueeze axes [1, 2], or Reshape to [1, C, 1, 1]), as Caffe2
    exports write a scale layer: they must be sliced with c1's channels."""
    b = Builder(11)
    x = b.bn(b.conv("x", 3, 8, name="c1"), 8)
    for op, name in (("Mul", "scale"), ("Add", "shift")):
        c = b.const(name, (b.rng.uniform(0.5, 1.5, 8) if op == "Mul" else b.rng.standard_normal(8) * 0.5).astype(np.float32))
        if via == "unsqueeze":
            v = b.op("Unsqueeze", [c, b.const(name + ".axes", np.array([1, 2], np.int64))])
        else:
            v = b.op("Reshape", [c, b.const(name + ".shape", np.array([1, 8, 1, 1], np.int64))])
        x = b.op(op, [x, v])
    y = b.op("Relu", [b.conv(b.op("Relu", [x]), 8, 6, name="c2")])
    g = b.op("Flatten", [b.op("GlobalAveragePool", [y])])
    return b.model(b.gemm(g, 6, 3, name="fc"), [1, 3, 6, 6]), [{"c1"}, {"c2"}], {"fc": "graph output"}


# ---- operators with shape-like inputs (Resize, Upsample, Expand, Tile; Shape) -----------------------
def case_resize_sizes():
    """Conv(3->8) -> Relu -> Resize to the constant sizes [1,8,16,16] -> Conv(8->4): `sizes`
    names the channel count and must shrink with c1."""
    b = Builder(11)
    x = b.op("Relu", [b.conv("x", 3, 8, name="c1")])
    sizes = b.const("sizes", np.array([1, 8, 16, 16], dtype=np.int64))
    x = b.op("Resize", [x, "", "", sizes], mode="nearest")
    return b.model(b.conv(x, 8, 4, name="c2"), [1, 3, 8, 8]), [{"c1"}, {"c2"}], {"c2": "graph output"}


def case_resize_shared_sizes():
    """One sizes constant read by two Resize nodes whose channels are pruned independently."""
    b = Builder(12)
    sizes = b.const("sizes", np.array([1, 8, 8, 8], dtype=np.int64))
    x = b.op("Resize", [b.op("Relu", [b.conv("x", 3, 8, name="c1")]), "", "", sizes], mode="nearest")
    x = b.op("Resize", [b.op("Relu", [b.conv(x, 8, 8, name="c2")]), "", "", sizes], mode="nearest")
    return b.model(b.conv(x, 8, 4, name="c3"), [1, 3, 4, 4]), [{"c1"}, {"c2"}], {"c3": "graph output"}


def case_resize_scales(opset=13):
    """Resize/Upsample by constant scales that leave the channel axis alone (opset 9: Upsample
    with a scales input; opset 7: Upsample with a scales attribute; 10: Resize with 2 inputs)."""
    b = Builder(13)
    x = b.op("Relu", [b.conv("x", 3, 8, name="c1")])
    scales = [1.0, 1.0, 2.0, 2.0]
    if opset == 7:
        x = b.op("Upsample", [x], scales=scales)
    elif opset < 11:
        x = b.op("Upsample" if opset < 10 else "Resize", [x, b.const("scales", np.array(scales, dtype=np.float32))])
    else:
        x = b.op("Resize", [x, b.const("roi", np.zeros(0, np.float32)), b.const("scales", np.array(scales, np.float32))],
                 mode="linear")
    return b.model(b.conv(x, 8, 4, name="c2"), [1, 3, 4, 4], opset=opset), [{"c1"}, {"c2"}], {"c2": "graph output"}


def case_expand_tile():
    """Expand to a constant shape naming the channels (rewritten), Expand to a shape that does not
    reach the channel axis, and Tile with repeat 1 on the channels."""
    b = Builder(14)
    x = b.op("Relu", [b.conv("x", 3, 8, name="c1")])
    g = b.op("GlobalAveragePool", [x])
    e1 = b.op("Expand", [g, b.const("shape_full", np.array([1, 8, 4, 4], dtype=np.int64))])
    e2 = b.op("Expand", [g, b.const("shape_hw", np.array([4, 4], dtype=np.int64))])
    y = b.op("Mul", [x, b.op("Add", [e1, e2])])
    y = b.op("Tile", [y, b.const("repeats", np.array([1, 1, 2, 2], dtype=np.int64))])
    return b.model(b.conv(y, 8, 4, name="c2"), [1, 3, 4, 4]), [{"c1"}, {"c2"}], {"c2": "graph output"}


def case_shape_input_fixed(kind):
    """Shape-like inputs that change the channel count or are not constant: c1 is never pruned,
    c0 before it still is. (A pooled head, so that the MAC count does not depend on a spatial
    size that only ONNX's data propagation knows.)"""
    b = Builder(15)
    x = b.op("Relu", [b.conv("x", 3, 6, name="c0")])
    x = b.op("Relu", [b.conv(x, 6, 4, name="c1")])
    cout = 4
    if kind == "resize_channel_scale":
        x = b.op("Resize", [x, "", b.const("scales", np.array([1, 2, 2, 2], np.float32))], mode="nearest")
        cout, why = 8, "scales the channel axis by 2 ('scales')"
    elif kind == "tile_channels":
        x = b.op("Tile", [x, b.const("repeats", np.array([1, 2, 1, 1], np.int64))])
        cout, why = 8, "scales the channel axis by 2 ('repeats')"
    elif kind == "resize_sizes_computed":  # from the input's spatial size: not a constant
        hw = b.op("Slice", [b.op("Shape", ["x"]), b.const("s0", np.array([2], np.int64)), b.const("s1", np.array([4], np.int64))])
        hw = b.op("Mul", [hw, b.const("two", np.array([2], np.int64))])
        sizes = b.op("Concat", [b.const("nc", np.array([1, 4], np.int64)), hw], axis=0)
        x = b.op("Resize", [x, "", "", sizes], mode="nearest")
        why = "has a shape-like input 'sizes' that is not constant"
    elif kind == "shape_of_channels":  # sizes computed from the carried tensor's own shape
        nc = b.op("Slice", [b.op("Shape", [x]), b.const("s0", np.array([0], np.int64)), b.const("s1", np.array([2], np.int64))])
        sizes = b.op("Concat", [nc, b.const("hw", np.array([12, 12], np.int64))], axis=0)
        x = b.op("Resize", [x, "", "", sizes], mode="nearest")
        why = "(Shape) reads their count"
    head = b.op("Flatten", [b.op("GlobalAveragePool", [b.op("Relu", [x])])])
    return b.model(b.gemm(head, cout, 3, name="fc"), [1, 3, 6, 6]), [{"c0"}, {"c1"}, {"fc"}], {"c1": why}


CASES = {
    "chain_transB1": lambda: case_chain(1),
    "chain_transB0": lambda: case_chain(0),
    "chain_no_bias": lambda: case_chain(1, bias=False),
    "constant_nodes": lambda: case_chain(1, weights_as="constant"),
    "residual_add": lambda: case_residual("Add"),
    "residual_sum": lambda: case_residual("Sum"),
    "concat": case_concat,
    "depthwise": case_depthwise,
    "matmul_reshape": case_matmul_reshape,
    "ir3_initializers_as_inputs": case_ir3_inputs,
    "opset21": case_opset21,
    "transpose_unfollowable": case_transpose,
    "scale_layer_unsqueeze": lambda: case_scale_layer("unsqueeze"),
    "scale_layer_reshape": lambda: case_scale_layer("reshape"),
    "resize_sizes": case_resize_sizes,
    "resize_shared_sizes": case_resize_shared_sizes,
    "resize_scales": lambda: case_resize_scales(13),
    "resize_opset10": lambda: case_resize_scales(10),
    "upsample_opset9": lambda: case_resize_scales(9),
    "upsample_opset7": lambda: case_resize_scales(7),
    "expand_tile": case_expand_tile,
    "resize_channel_scale_fixed": lambda: case_shape_input_fixed("resize_channel_scale"),
    "tile_channels_fixed": lambda: case_shape_input_fixed("tile_channels"),
    "resize_sizes_computed_fixed": lambda: case_shape_input_fixed("resize_sizes_computed"),
    "shape_of_channels_fixed": lambda: case_shape_input_fixed("shape_of_channels"),
}


# ---- independent reference -------------------------------------------------------------------------
def out_axis(layer, model):
    if layer["op"] == "Conv":
        return 0
    if layer["op"] == "MatMul":
        return 1
    node = next(n for n in model.graph.node if n.name == layer["name"])
    return 0 if any(a.name == "transB" and a.i for a in node.attribute) else 1


def l1(w, axis):
    return np.abs(w.astype(np.float64)).sum(axis=tuple(i for i in range(w.ndim) if i != axis))


def expected_group(model, layers, threshold):
    """Rate, error and removed channel indices for an index-aligned group (residual / depthwise)."""
    W = weights_of(model)
    score = sum(l1(W[L["weight"]], out_axis(L, model)) for L in layers)
    numel = sum(W[L["weight"]].size for L in layers)
    order = np.argsort(score, kind="stable")
    c = len(score)
    rate, removed, err = 0.0, 0, 0.0
    for r in GRID:
        k = int(np.floor(r * c + 0.5))
        if k >= c:
            break
        e = score[order[:k]].sum() / numel
        if e > threshold:
            break
        rate, removed, err = r, k, e
    return rate, err, sorted(order[:removed].tolist())


def zero_scale_layers(m, W, value, rem):
    """Along a chain of single consumers (BatchNormalization, Mul, Add) from `value`: zero the removed
    channels of the shift constants that reach an Add through Unsqueeze / Reshape."""
    producer = {o: n for n in m.graph.node for o in n.output}
    while True:
        users = [n for n in m.graph.node if value in n.input]
        if len(users) != 1 or users[0].op_type not in ("BatchNormalization", "Mul", "Add"):
            return
        n = users[0]
        if n.op_type == "Add":
            for v in n.input:
                p = producer.get(v)
                if p is not None and p.op_type in ("Unsqueeze", "Reshape") and p.input[0] in W:
                    c = W[p.input[0]].copy()
                    c[rem] = 0
                    set_weight(m, p.input[0], c)
        value = n.output[0]


def zero_removed(model, report):
    """The original model with every removed filter's weights, bias and BN parameters zeroed."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    W = weights_of(m)
    for L in report["layers"]:
        rem = L["removed_channels"]
        if not rem:
            continue
        node = next(n for n in m.graph.node if n.name == L["name"])
        ax = out_axis(L, m)
        w = W[L["weight"]].copy()
        idx = [slice(None)] * w.ndim
        idx[ax] = rem
        w[tuple(idx)] = 0
        set_weight(m, L["weight"], w)
        if len(node.input) > 2:
            b = W[node.input[2]].copy()
            b[..., rem] = 0
            set_weight(m, node.input[2], b)
        zero_scale_layers(m, W, node.output[0], rem)
        for n in m.graph.node:
            if node.output[0] not in n.input:
                continue
            if n.op_type == "BatchNormalization":
                for p in n.input[1:4]:
                    v = W[p].copy()
                    v[rem] = 0
                    set_weight(m, p, v)
            if n.op_type == "Add":
                for p in n.input:
                    if p in W:
                        v = W[p].copy()
                        v[..., rem] = 0
                        set_weight(m, p, v)
    return m


@pytest.mark.parametrize("case", sorted(CASES))
def test_rate_zero_keeps_outputs(case, tmp_path):
    model, _, _ = CASES[case]()
    src, dst = tmp_path / "m.onnx", tmp_path / "p.onnx"
    onnx.save(model, src)
    report = prune(src, dst, "--threshold", "0")
    assert all(L["rate"] == 0 and L["kept_channels"] == L["channels"] for L in report["layers"])
    onnx.checker.check_model(onnx.load(dst), full_check=True)
    (a,), feeds = ort_run(model)
    (b,), _ = ort_run(str(dst), feeds)
    assert_close(b, a)


@pytest.mark.parametrize("case", sorted(CASES))
def test_pruned_model_matches_reference(case, tmp_path):
    model, groups, fixed = CASES[case]()
    src, dst = tmp_path / "m.onnx", tmp_path / "p.onnx"
    onnx.save(model, src)
    # A threshold that prunes about half of the first prunable group, computed independently.
    probe = prune(src, tmp_path / "probe.onnx", "--threshold", "0")
    by_name = {L["name"]: L for L in probe["layers"]}
    first = next(g for g in groups if all(by_name[n]["prunable"] for n in g))
    members = [by_name[n] for n in sorted(first)]
    W = weights_of(model)
    score = sum(l1(W[L["weight"]], out_axis(L, model)) for L in members)
    # Halfway between the errors at rates 0.5 and 0.6, away from float rounding at the boundary.
    numel = sum(W[L["weight"]].size for L in members)
    errs = [np.sort(score)[:int(np.floor(r * len(score) + 0.5))].sum() / numel for r in (0.5, 0.6)]
    threshold = (errs[0] + errs[1]) / 2

    report = prune(src, dst, "--threshold", repr(float(threshold)))
    layers = {L["name"]: L for L in report["layers"]}
    # Groups: exactly the expected sets of layers.
    got_groups = {frozenset(g["layers"]) for g in report["groups"]}
    for g in groups:
        assert frozenset(g) in got_groups, (g, got_groups)
    # Fixed layers name their reason.
    for name, why in fixed.items():
        assert not layers[name]["prunable"] and why in layers[name]["reason"], layers[name]
    # Rates, errors and removed filters from the definition.
    pruned_any = False
    for g in groups:
        if not all(layers[n]["prunable"] for n in g):
            assert all(layers[n]["rate"] == 0 for n in g)
            continue
        rate, err, removed = expected_group(model, [layers[n] for n in sorted(g)], threshold)
        for n in g:
            assert layers[n]["rate"] == pytest.approx(rate), n
            assert layers[n]["pruning_error"] == pytest.approx(err, rel=1e-9, abs=1e-12), n
            assert layers[n]["removed_channels"] == removed, n
            assert layers[n]["kept_channels"] == layers[n]["channels"] - len(removed)
        pruned_any |= bool(removed)
    assert pruned_any
    # The written model: valid, smaller, and computing the zeroed original.
    pruned = onnx.load(dst)
    onnx.checker.check_model(pruned, full_check=True)
    (ref,), feeds = ort_run(zero_removed(model, report))
    (out,), _ = ort_run(str(dst), feeds)
    assert_close(out, ref)
    t = report["totals"]
    assert t["params_before"] == count_params(model)
    assert t["params_after"] == count_params(pruned) < t["params_before"]
    assert t["macs_before"] == count_macs(model)
    assert t["macs_after"] == count_macs(pruned)


def test_thresholds_file_and_grid(tmp_path):
    model, _, _ = case_chain()
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    th = tmp_path / "th.json"
    th.write_text('{"c2": 1000.0}')  # only c2 gets a threshold: every grid rate is allowed
    report = prune(src, tmp_path / "p.onnx", "--thresholds", th, "--rates", "0,0.25,0.5")
    layers = {L["name"]: L for L in report["layers"]}
    assert layers["c2"]["rate"] == 0.5 and layers["c2"]["kept_channels"] == 6
    assert layers["c1"]["rate"] == 0 and layers["c1"]["threshold"] is None
    assert report["rates"] == [0, 0.25, 0.5]


def test_uniform_rate(tmp_path):
    """--rate R removes floor(R*C + 0.5) channels of every prunable group (at most C - 1), the ones
    with the smallest L1 scores; fixed groups keep all. c1's filters are set so that the order is
    known by hand: filter i's weights all equal s[i] / 27, so its L1 norm is s[i]."""
    model, _, _ = case_chain()
    s = np.array([5, 1, 7, 3, 8, 2, 6, 4], dtype=np.float64)
    set_weight(model, "c1.weight", np.repeat(s / 27, 27).reshape(8, 3, 3, 3))
    src, dst = tmp_path / "m.onnx", tmp_path / "p.onnx"
    onnx.save(model, src)
    report = prune(src, dst, "--rate", "0.3")
    layers = {L["name"]: L for L in report["layers"]}
    assert report["uniform_rate"] == 0.3
    # c1: k = floor(2.4 + 0.5) = 2: the filters with L1 1 and 2 (indices 1 and 5); error (1 + 2) / 216.
    assert layers["c1"]["removed_channels"] == [1, 5] and layers["c1"]["kept_channels"] == 6
    assert layers["c1"]["pruning_error"] == pytest.approx(3 / 216, rel=1e-6)
    assert layers["c1"]["rate"] == 0.3 and layers["c1"]["threshold"] is None
    # c2 (12 filters): k = 4; fc1 (10 outputs): k = 3; by the stable L1 order, from numpy.
    W = weights_of(model)
    for name, k in (("c2", 4), ("fc1", 3)):
        score = l1(W[layers[name]["weight"]], out_axis(layers[name], model))
        assert layers[name]["removed_channels"] == sorted(np.argsort(score, kind="stable")[:k].tolist()), name
    assert layers["fc2"]["removed_channels"] == [] and not layers["fc2"]["prunable"]
    (ref,), feeds = ort_run(zero_removed(model, report))
    (out,), _ = ort_run(str(dst), feeds)
    assert_close(out, ref)
    # --keep c1: c1 stays whole, the other groups lose what they lost above.
    kept = prune(src, tmp_path / "k.onnx", "--rate", "0.3", "--keep", "c1")
    kl = {L["name"]: L for L in kept["layers"]}
    assert kl["c1"]["kept_channels"] == 8 and not kl["c1"]["prunable"] and "--keep c1" in kl["c1"]["reason"]
    assert all(kl[n]["removed_channels"] == layers[n]["removed_channels"] for n in ("c2", "fc1"))
    # A rate that would remove every channel keeps one: c1 k = floor(7.6 + 0.5) = 8 -> 7.
    report = prune(src, tmp_path / "q.onnx", "--rate", "0.95")
    c1 = next(L for L in report["layers"] if L["name"] == "c1")
    assert c1["kept_channels"] == 1 and c1["removed_channels"] == [0, 1, 2, 3, 5, 6, 7]


@pytest.mark.parametrize("metric", ["params", "macs"])
def test_target_reduction(metric, tmp_path):
    model, _, _ = case_residual()
    src, dst = tmp_path / "m.onnx", tmp_path / "p.onnx"
    onnx.save(model, src)
    report = prune(src, dst, f"--target-{metric}-reduction", "0.3")
    pruned = onnx.load(dst)
    before, after = (count_params(model), count_params(pruned)) if metric == "params" else (count_macs(model), count_macs(pruned))
    reached = 1 - after / before
    assert report["target"]["reached"] == pytest.approx(reached)
    # No other global threshold on the grid comes closer: check every candidate threshold.
    best = abs(reached - 0.3)
    for t in np.linspace(0, 0.2, 41):
        r = prune(src, tmp_path / "q.onnx", "--threshold", repr(float(t)))["totals"][f"{metric}_reduction"]
        assert abs(r - 0.3) >= best - 1e-12


def test_nothing_prunable_is_reported(tmp_path):
    b = Builder(8)
    out = b.gemm(b.op("Flatten", ["x"]), 12, 3, name="only")
    src = tmp_path / "m.onnx"
    onnx.save(b.model(out, [1, 3, 2, 2]), src)
    p = prune(src, tmp_path / "p.onnx", "--threshold", "1", check=False)
    assert isinstance(p, dict), p.stderr
    assert p["totals"]["prunable_groups"] == 0


def test_help_and_version():
    from hpcnn_test import run
    assert "--threshold" in run("prune-rate", "--help").stdout
    assert "hpcnn" in run("prune-rate", "--version").stdout


def test_resize_sizes_follow_the_pruned_channels(tmp_path):
    """The Resize fault: 3 of c1's 8 channels removed; the written `sizes` names 5, onnxruntime
    runs the model, and it computes what the original computes with those filters zeroed."""
    model, _, _ = case_resize_sizes()
    src, dst = tmp_path / "m.onnx", tmp_path / "p.onnx"
    onnx.save(model, src)
    report = prune(src, dst, "--rates", "0,0.375", "--threshold", "1000")
    c1 = next(L for L in report["layers"] if L["name"] == "c1")
    assert c1["kept_channels"] == 5 and len(c1["removed_channels"]) == 3
    pruned = onnx.load(dst)
    resize = next(n for n in pruned.graph.node if n.op_type == "Resize")
    assert weights_of(pruned)[resize.input[3]].tolist() == [1, 5, 16, 16]
    (ref,), feeds = ort_run(zero_removed(model, report))
    (out,), _ = ort_run(str(dst), feeds)
    assert out.shape == ref.shape == (1, 4, 16, 16)
    assert_close(out, ref)


def test_shared_sizes_constant_gets_a_copy_per_node(tmp_path):
    model, _, _ = case_resize_shared_sizes()
    src, dst = tmp_path / "m.onnx", tmp_path / "p.onnx"
    onnx.save(model, src)
    report = prune(src, dst, "--rates", "0,0.25,0.5", "--thresholds", _write(tmp_path / "t.json", '{"c1": 1000}'))
    kept = {L["name"]: L["kept_channels"] for L in report["layers"]}
    assert kept["c1"] == 4 and kept["c2"] == 8
    pruned = onnx.load(dst)
    W = weights_of(pruned)
    sizes = [W[n.input[3]].tolist() for n in pruned.graph.node if n.op_type == "Resize"]
    assert sizes == [[1, 4, 8, 8], [1, 8, 8, 8]]
    resize = [n.input[3] for n in pruned.graph.node if n.op_type == "Resize"]
    assert resize[0] != "sizes" and resize[1] == "sizes"  # a fresh copy for c1's Resize only
    (ref,), feeds = ort_run(zero_removed(model, report))
    (out,), _ = ort_run(str(dst), feeds)
    assert_close(out, ref)


def _write(path, text):
    path.write_text(text)
    return path


# ---- values read inside If branches ---------------------------------------------------------------
def case_if_branches():
    """s (prunable) -> s2 -> c0 -> c1 -> If: both branches run a Conv on c1's output with main-graph
    weights; the else branch also reads s2's output with c0's weight."""
    b = Builder(16)
    x2 = b.op("Relu", [b.conv(b.op("Relu", [b.conv("x", 3, 6, name="s")]), 6, 3, name="s2")])
    a = b.op("Relu", [b.conv(x2, 3, 6, name="c0")])
    r = b.op("Relu", [b.conv(a, 6, 8, name="c1")])
    wt = b.const("t.weight", b.weight((4, 8, 3, 3)))
    we = b.const("e.weight", b.weight((4, 8, 3, 3)))
    f = helper.make_tensor_value_info
    then_g = helper.make_graph([helper.make_node("Conv", [r, wt], ["t"], name="t", pads=[1] * 4)], "then",
                               [], [f("t", onnx.TensorProto.FLOAT, None)])
    else_g = helper.make_graph([
        helper.make_node("Conv", [r, we], ["e"], name="e", pads=[1] * 4),
        helper.make_node("Conv", [x2, "c0.weight"], ["q"], name="q", pads=[1] * 4),
        helper.make_node("ReduceMean", ["q"], ["qm"], name="qm", axes=[1]),
        helper.make_node("Add", ["e", "qm"], ["e_out"], name="e_add")], "else", [], [f("e_out", onnx.TensorProto.FLOAT, None)])
    b.nodes.append(helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g))
    g = helper.make_graph(b.nodes, "g", [f("x", onnx.TensorProto.FLOAT, [1, 3, 6, 6]), f("cond", onnx.TensorProto.BOOL, [])],
                          [f("y", onnx.TensorProto.FLOAT, [1, 4, 6, 6])], initializer=b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def test_channels_read_inside_if_branches_are_never_pruned(tmp_path):
    model = case_if_branches()
    src, dst = tmp_path / "m.onnx", tmp_path / "p.onnx"
    onnx.save(model, src)
    report = prune(src, dst, "--rates", "0,0.5", "--threshold", "1000")
    layers = {L["name"]: L for L in report["layers"]}
    assert layers["s"]["prunable"] and layers["s"]["kept_channels"] == 3
    # s2's channels meet the shared weight of c0 first (topological order); the else branch reads them too.
    for name, why in {"c1": "read inside a subgraph of node 'branch' (If)",
                      "s2": "constant 'c0.weight' of node 'c0' (Conv) is shared",
                      "c0": "constant 'c0.weight' of node 'c0' (Conv) is shared"}.items():
        assert not layers[name]["prunable"] and why in layers[name]["reason"], layers[name]
        assert layers[name]["kept_channels"] == layers[name]["channels"]
    pruned = onnx.load(dst)
    onnx.checker.check_model(pruned, full_check=True)
    before, after = weights_of(model), weights_of(pruned)
    for name in ("c0.weight", "c1.weight", "t.weight", "e.weight"):
        np.testing.assert_array_equal(after[name], before[name])
    reference = zero_removed(model, report)
    x = np.random.default_rng(0).standard_normal((1, 3, 6, 6)).astype(np.float32)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        (ref,), _ = ort_run(reference, feeds)
        (out,), _ = ort_run(str(dst), feeds)
        assert out.shape == (1, 4, 6, 6)
        assert_close(out, ref)


def case_channel_shuffle(g=2, c=8):
    """Conv(3->c) -> Relu -> channel shuffle of g groups -> Conv(c->6) -> ...: followed as a permutation."""
    b = Builder(12)
    x = b.op("Relu", [b.conv("x", 3, c, name="c1")])
    x = b.op("Reshape", [x, b.const("shuffle.in", np.array([1, g, c // g, 6, 6], np.int64))])
    x = b.op("Transpose", [x], perm=[0, 2, 1, 3, 4])
    x = b.op("Reshape", [x, b.const("shuffle.out", np.array([1, c, 6, 6], np.int64))])
    y = b.op("Relu", [b.conv(x, c, 6, name="c2")])
    h = b.op("Flatten", [b.op("GlobalAveragePool", [y])])
    return b.model(b.gemm(h, 6, 3, name="fc"), [1, 3, 6, 6])


def test_channel_shuffle_is_followed_as_a_permutation(tmp_path):
    """Channel j of each shuffle group goes with channel j of the others: the classes are the
    pairs {j, j + C/g}, ranked by their summed L1 norms; the written model computes what the
    original computes with those filters zeroed."""
    g, c = 2, 8
    model = case_channel_shuffle(g, c)
    src, dst = tmp_path / "m.onnx", tmp_path / "p.onnx"
    onnx.save(model, src)
    W = weights_of(model)
    norms = l1(W["c1.weight"], 0)
    m = c // g
    score = np.array([sum(norms[i * m + j] for i in range(g)) for j in range(m)])
    order = np.sort(score)
    numel = W["c1.weight"].size
    threshold = (order[:2].sum() + order[:3].sum()) / 2 / numel  # between removing 2 and 3 of the 4 classes
    report = prune(src, dst, "--threshold", repr(float(threshold)))
    c1 = next(L for L in report["layers"] if L["name"] == "c1")
    assert c1["prunable"], c1.get("reason")
    gone = sorted(np.argsort(score, kind="stable")[:2].tolist())
    assert c1["removed_channels"] == sorted(i * m + j for j in gone for i in range(g))
    assert c1["pruning_error"] == pytest.approx(order[:2].sum() / numel, rel=1e-9)
    pruned = onnx.load(dst)
    onnx.checker.check_model(pruned, full_check=True)
    shapes = {t.name: numpy_helper.to_array(t).tolist() for t in pruned.graph.initializer if t.name.startswith("shuffle")}
    assert shapes == {"shuffle.in": [1, g, m - 2, 6, 6], "shuffle.out": [1, c - 2 * g, 6, 6]}
    (ref,), feeds = ort_run(zero_removed(model, report))
    (out,), _ = ort_run(str(dst), feeds)
    assert_close(out, ref)


def test_channel_shuffle_variants_that_are_not_followed(tmp_path):
    """A Transpose that is not the shuffle's, after the 5-D Reshape, stops the analysis there."""
    model = case_channel_shuffle()
    for n in model.graph.node:
        if n.op_type == "Transpose":
            n.attribute[0].ints[:] = [0, 1, 2, 4, 3]
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    report = prune(src, tmp_path / "p.onnx", "--threshold", "1")
    c1 = next(L for L in report["layers"] if L["name"] == "c1")
    assert not c1["prunable"] and "Reshape" in c1["reason"], c1


@pytest.mark.parametrize("via", ["unsqueeze", "reshape"])
def test_scale_layer_constants_do_not_stop_the_pruning(via, tmp_path):
    """Before they were followed, such a scale layer fixed c1's channels (and, in a real export,
    every layer of the model)."""
    model, _, _ = case_scale_layer(via)
    onnx.save(model, tmp_path / "m.onnx")
    report = prune(tmp_path / "m.onnx", tmp_path / "p.onnx", "--rate", "0.5")
    c1 = next(L for L in report["layers"] if L["name"] == "c1")
    assert c1["prunable"] and c1["kept_channels"] == 4, c1
    w = weights_of(onnx.load(tmp_path / "p.onnx"))
    assert w["scale"].shape == (4,) and w["shift"].shape == (4,)
    if via == "reshape":
        assert w["scale.shape"].tolist() == [1, 4, 1, 1]


@pytest.mark.parametrize("case", [case_chain, case_residual])
def test_mask_channels_zeroes_what_removal_removes(case, tmp_path):
    """--mask-channels: the same rates and channels as removal, but every shape stays; the removed
    channels' filters and biases are 0 and so are the scale and bias of the BatchNormalization
    that reads the conv directly; nothing else changes. The masked model computes what the
    physically pruned one computes (onnxruntime), and the masked channels are exactly 0 after the
    BatchNormalization and the Relu (graph outputs added for them)."""
    model, _, _ = case()
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    removed = prune(src, tmp_path / "r.onnx", "--rate", "0.5")
    masked = prune(src, tmp_path / "k.onnx", "--rate", "0.5", "--mask-channels")
    assert masked["mask_channels"] is True
    rl = {L["name"]: L["removed_channels"] for L in removed["layers"]}
    ml = {L["name"]: L["removed_channels"] for L in masked["layers"]}
    assert rl == ml and any(rl.values())
    before, after = weights_of(model), weights_of(onnx.load(tmp_path / "k.onnx"))
    assert {k: v.shape for k, v in before.items()} == {k: v.shape for k, v in after.items()}
    expected = {k: v.copy() for k, v in before.items()}  # the original with the masked slices zeroed, by hand
    for L in masked["layers"]:
        ch = L["removed_channels"]
        if not ch:
            continue
        node = next(n for n in model.graph.node if n.name == L["name"])
        axis = out_axis(L, model)
        np.moveaxis(expected[L["weight"]], axis, 0)[ch] = 0
        if len(node.input) > 2:
            expected[node.input[2]][ch] = 0
        for bn in (n for n in model.graph.node if n.op_type == "BatchNormalization" and n.input[0] == node.output[0]):
            expected[bn.input[1]][ch] = 0
            expected[bn.input[2]][ch] = 0
    for k in before:
        np.testing.assert_array_equal(after[k], expected[k], err_msg=k)
    (ref,), feeds = ort_run(str(tmp_path / "r.onnx"))
    (out,), _ = ort_run(str(tmp_path / "k.onnx"), feeds)
    assert_close(out, ref)
    # Intermediate values as graph outputs: the masked channels are exactly zero after each conv's
    # BatchNormalization / Relu.
    m = onnx.load(tmp_path / "k.onnx")
    convs = {L["name"]: L["removed_channels"] for L in masked["layers"] if L["op"] == "Conv" and L["removed_channels"]}
    probes = []
    for n in m.graph.node:
        if n.op_type in ("BatchNormalization", "Relu"):
            src_conv = n.input[0]
            prod = {o: p for p in m.graph.node for o in p.output}
            while src_conv in prod and prod[src_conv].op_type in ("BatchNormalization", "Relu"):
                src_conv = prod[src_conv].input[0]
            if src_conv in prod and prod[src_conv].name in convs:
                probes.append((n.output[0], convs[prod[src_conv].name]))
    assert probes
    for v, _ in probes:
        m.graph.output.append(helper.make_tensor_value_info(v, onnx.TensorProto.FLOAT, None))
    outs, _ = ort_run(m, feeds)
    for (v, ch), o in zip(probes, outs[1:]):
        assert np.all(o[:, ch] == 0), v
        assert np.any(o != 0), v


def test_mask_channels_refuses_unstructured(tmp_path):
    model, _, _ = case_chain()
    onnx.save(model, tmp_path / "m.onnx")
    p = prune(tmp_path / "m.onnx", tmp_path / "k.onnx", "--unstructured", "0.5", "--mask-channels", check=False)
    assert p.returncode == 1 and "--unstructured cannot be combined with --thresholds, --mask-channels" in p.stderr
