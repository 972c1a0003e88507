"""bn-polish as a user runs it, on real Fashion-MNIST images: the written statistics against
onnxruntime (a fixed point: the written model's BatchNorm inputs, run by onnxruntime over the same
samples, have exactly the written mean and population variance), against a NumPy computation of
the same passes (which also pins the order: a later BatchNorm sees the earlier ones updated),
2 ranks against 1, batch size independence, every other protobuf field unchanged, a model
without BatchNorm, and bad inputs (corrupt, truncated, empty, missing, too few samples) failing
cleanly on every rank under mpirun."""
import json
import os
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import hpcnn_test as H
from test_dist_train import FM, fashion_mnist, small_idx  # noqa: F401 (the dataset check)

MEAN, STD = 0.286, 0.353


def polish(*args, ranks=0, check=True):
    cmd = [H.tool("bn-polish"), *map(str, args)]
    if ranks:
        cmd = [*H.launch(ranks), *cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if check:
        assert p.returncode == 0, p.stderr
    return p


def data_args(tmp, n=300):
    d = small_idx(tmp, n)
    return ["--data", d["train_images"], "--labels", d["train_labels"], "--mean", MEAN, "--std", STD]


def images(tmp, n):
    raw = np.frombuffer((tmp / "img.idx").read_bytes()[16:16 + n * 784], np.uint8).reshape(n, 1, 28, 28)
    return ((raw.astype(np.float32) / 255.0 - np.float32(MEAN)) / np.float32(STD)).astype(np.float32)


def branchy_model(path, seed=0):
    """Two BatchNorms at depth 0 (two branches from the images), one at depth 1 after their sum,
    with running statistics far from the data's (mean 0.5, var 4), so that re-estimating matters."""
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    inits = []
    for name, c in (("a", 4), ("b", 4), ("c", 6)):
        inits += [numpy_helper.from_array(np.full(c, 1.1, np.float32), f"{name}.scale"),
                  numpy_helper.from_array(np.full(c, 0.1, np.float32), f"{name}.bias"),
                  numpy_helper.from_array(np.full(c, 0.5, np.float32), f"{name}.mean"),
                  numpy_helper.from_array(np.full(c, 4.0, np.float32), f"{name}.var")]
    inits += [numpy_helper.from_array(w(4, 1, 3, 3), "ca.w"), numpy_helper.from_array(w(4, 1, 1, 1), "cb.w"),
              numpy_helper.from_array(w(6, 4, 3, 3), "cc.w"), numpy_helper.from_array(w(10, 6), "fc.w"),
              numpy_helper.from_array(np.zeros(10, np.float32), "fc.b")]
    bn = lambda n, x, y: helper.make_node("BatchNormalization", [x, f"{n}.scale", f"{n}.bias", f"{n}.mean", f"{n}.var"],  # noqa: E731
                                          [y], name=f"bn_{n}", epsilon=1e-5)
    nodes = [helper.make_node("Conv", ["x", "ca.w"], ["ca"], pads=[1, 1, 1, 1], name="conv_a"), bn("a", "ca", "ba"),
             helper.make_node("Conv", ["x", "cb.w"], ["cb"], name="conv_b"), bn("b", "cb", "bb"),
             helper.make_node("Add", ["ba", "bb"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Conv", ["r", "cc.w"], ["cc"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv_c"),
             bn("c", "cc", "bc"), helper.make_node("Relu", ["bc"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], transB=1)]
    g = helper.make_graph(nodes, "branchy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 28, 28])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


def stats_of(path, names):
    init = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    return {n: (init[f"{n}.mean"], init[f"{n}.var"]) for n in names}


def ort_inputs_moments(path, x, values):
    m = onnx.load(path)
    for v in values:
        m.graph.output.append(helper.make_tensor_value_info(v, TensorProto.FLOAT, None))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run(values, {"x": x})
    return [(o.astype(np.float64).mean(axis=(0, 2, 3)), o.astype(np.float64).var(axis=(0, 2, 3))) for o in outs]


def test_statistics_are_a_fixed_point_of_onnxruntime(tmp_path):
    model = branchy_model(tmp_path / "m.onnx")
    r = json.loads(polish(model, "-o", tmp_path / "p.onnx", *data_args(tmp_path), "--batch-size", 64).stdout)
    assert r["samples"] == 300 and r["passes"] == 2 and r["forward_samples"] == 600
    assert [(l["name"], l["pass"]) for l in r["layers"]] == [("bn_a", 0), ("bn_b", 0), ("bn_c", 1)]
    written = stats_of(tmp_path / "p.onnx", "abc")
    got = ort_inputs_moments(str(tmp_path / "p.onnx"), images(tmp_path, 300), ["ca", "cb", "cc"])
    for n, (mean, var) in zip("abc", got):
        np.testing.assert_allclose(written[n][0], mean, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(written[n][1], var, rtol=1e-4, atol=1e-6)
    # The report's summaries are those of the initializers.
    c = r["layers"][2]
    assert c["old"]["var_average"] == pytest.approx(4.0) and c["new"]["var_average"] == pytest.approx(float(written["c"][1].mean()))


def conv2d(x, w, pad=0, stride=1):
    """Plain NumPy convolution (NCHW, OIHW), float64."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


def test_statistics_equal_numpy_with_earlier_layers_updated(tmp_path):
    model = branchy_model(tmp_path / "m.onnx")
    polish(model, "-o", tmp_path / "p.onnx", *data_args(tmp_path))
    init = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in onnx.load(model).graph.initializer}
    x = images(tmp_path, 300).astype(np.float64)
    moments = lambda v: (v.mean(axis=(0, 2, 3)), v.var(axis=(0, 2, 3)))  # noqa: E731
    def bn(v, n, mean, var):
        s = lambda a: a[None, :, None, None]  # noqa: E731
        return s(init[f"{n}.scale"]) * (v - s(mean)) / np.sqrt(s(var) + 1e-5) + s(init[f"{n}.bias"])
    ca, cb = conv2d(x, init["ca.w"], pad=1), conv2d(x, init["cb.w"])
    (ma, va), (mb, vb) = moments(ca), moments(cb)
    r = np.maximum(bn(ca, "a", ma, va) + bn(cb, "b", mb, vb), 0)
    mc, vc = moments(conv2d(r, init["cc.w"], pad=1, stride=2))
    written = stats_of(tmp_path / "p.onnx", "abc")
    for n, (m, v) in zip("abc", [(ma, va), (mb, vb), (mc, vc)]):
        np.testing.assert_allclose(written[n][0], m, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(written[n][1], v, rtol=1e-4, atol=1e-6)
    # With the first two layers' old statistics (no ordering) the third would differ clearly.
    r_old = np.maximum(bn(ca, "a", init["a.mean"], init["a.var"]) + bn(cb, "b", init["b.mean"], init["b.var"]), 0)
    _, vc_old = moments(conv2d(r_old, init["cc.w"], pad=1, stride=2))
    assert np.max(np.abs(vc_old / vc - 1)) > 0.1


def test_two_ranks_equal_one_and_batch_size_does_not_matter(tmp_path):
    model = branchy_model(tmp_path / "m.onnx")
    args = data_args(tmp_path)
    polish(model, "-o", tmp_path / "one.onnx", *args, "--batch-size", 32)
    polish(model, "-o", tmp_path / "two.onnx", *args, "--batch-size", 32, ranks=2)
    polish(model, "-o", tmp_path / "big.onnx", *args, "--batch-size", 300)
    one, two, big = (stats_of(tmp_path / f, "abc") for f in ("one.onnx", "two.onnx", "big.onnx"))
    for n in "abc":
        for k in (0, 1):
            np.testing.assert_allclose(two[n][k], one[n][k], rtol=1e-6, atol=0)
            np.testing.assert_allclose(big[n][k], one[n][k], rtol=1e-6, atol=1e-7)


def test_only_the_statistics_change(tmp_path):
    model = branchy_model(tmp_path / "m.onnx")
    polish(model, "-o", tmp_path / "p.onnx", *data_args(tmp_path), "--samples", 100)
    a, b = onnx.load(model), onnx.load(tmp_path / "p.onnx")
    changed = {f"{n}.{k}" for n in "abc" for k in ("mean", "var")}
    for ta, tb in zip(a.graph.initializer, b.graph.initializer):
        assert ta.name == tb.name
        if ta.name in changed:
            assert not np.array_equal(numpy_helper.to_array(ta), numpy_helper.to_array(tb))
            tb.CopyFrom(ta)
    assert a == b  # every other field, as protobuf messages


def test_model_without_batchnorm_is_written_unchanged_with_a_warning(tmp_path):
    from test_dist_train import tiny_cnn
    m = onnx.load(tiny_cnn(str(tmp_path / "t.onnx")))
    # Remove the tiny CNN's BatchNorm: Conv -> Relu.
    bn = next(n for n in m.graph.node if n.op_type == "BatchNormalization")
    relu = next(n for n in m.graph.node if n.input and n.input[0] == bn.output[0])
    relu.input[0] = bn.input[0]
    m.graph.node.remove(bn)
    for name in ("bn.scale", "bn.bias", "bn.mean", "bn.var"):
        m.graph.initializer.remove(next(t for t in m.graph.initializer if t.name == name))
    onnx.save(m, tmp_path / "nobn.onnx")
    p = polish(tmp_path / "nobn.onnx", "-o", tmp_path / "out.onnx", *data_args(tmp_path))
    assert "has no BatchNormalization node: the model is written unchanged" in p.stderr
    assert json.loads(p.stdout)["layers"] == []
    assert onnx.load(tmp_path / "out.onnx") == onnx.load(tmp_path / "nobn.onnx")


@pytest.mark.parametrize("ranks", [0, 2])
def test_bad_inputs_fail_cleanly_on_every_rank(tmp_path, ranks):
    model = branchy_model(tmp_path / "m.onnx")
    args = data_args(tmp_path)
    data = model.read_bytes()
    (tmp_path / "trunc.onnx").write_bytes(data[:len(data) // 2])
    (tmp_path / "empty.onnx").write_bytes(b"")
    img = (tmp_path / "img.idx").read_bytes()
    (tmp_path / "short.idx").write_bytes(img[:16 + 100 * 784 + 50])
    cases = [
        ([tmp_path / "trunc.onnx", *args], 2, "trunc.onnx"),
        ([tmp_path / "empty.onnx", *args], 2, "empty.onnx"),
        ([tmp_path / "absent.onnx", *args], 3, "absent.onnx"),
        ([model, "--data", tmp_path / "absent.idx", "--mean", MEAN, "--std", STD], 3, "absent.idx"),
        ([model, "--data", tmp_path / "short.idx", "--mean", MEAN, "--std", STD], 2, "short.idx"),
        ([model, *args, "--samples", 301], 1, "301 samples asked for, but"),
        ([model, *args, "--test-accuracy"], 1, "--test-accuracy needs --config"),
        ([model], 1, "training data: give --config"),
    ]
    for extra, code, message in cases:
        out = tmp_path / "out.onnx"
        p = polish(*extra, "-o", out, ranks=ranks, check=False)
        assert p.returncode == code, (extra, p.returncode, p.stderr)
        assert message in p.stderr, (extra, p.stderr)
        assert not out.exists() and not [f for f in os.listdir(tmp_path) if f.startswith(".out")]
    # An existing output is kept without -f.
    (tmp_path / "out.onnx").write_bytes(b"keep")
    p = polish(model, "-o", tmp_path / "out.onnx", *args, ranks=ranks, check=False)
    assert p.returncode == 3 and (tmp_path / "out.onnx").read_bytes() == b"keep"


def test_test_accuracy_with_a_bad_test_set_writes_nothing(tmp_path):
    """--test-accuracy evaluates the input model before polishing: a missing test set fails
    before any output exists. An empty -o is a usage error."""
    model = branchy_model(tmp_path / "m.onnx")
    small_idx(tmp_path, 300)
    cfg = {"model": str(model), "data": {"train_images": str(tmp_path / "img.idx"), "train_labels": str(tmp_path / "lbl.idx"),
                                         "test_images": str(tmp_path / "img.idx"), "test_labels": str(tmp_path / "absent.idx")},
           "augmentation": {"mean": [MEAN], "std": [STD]}}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    out = tmp_path / "out.onnx"
    p = polish(model, "--config", tmp_path / "c.json", "--test-accuracy", "-o", out, check=False)
    assert p.returncode == 3 and "absent.idx" in p.stderr and not out.exists(), p.stderr
    cfg["data"]["test_labels"] = str(tmp_path / "lbl.idx")
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    r = json.loads(polish(model, "--config", tmp_path / "c.json", "--test-accuracy", "--samples", 200, "-o", out).stdout)
    assert 0 <= r["test_accuracy_before"] <= 1 and 0 <= r["test_accuracy_after"] <= 1
    p = polish(model, "--config", tmp_path / "c.json", "-o", "", check=False)
    assert p.returncode == 1 and "-o: an empty path" in p.stderr


@pytest.mark.parametrize("attr,value,message", [
    ("training_mode", 1, "has training_mode = 1: by the ONNX spec it normalises with each batch's own statistics"),
    ("spatial", 0, "has spatial = 0: its statistics are per activation"),
])
def test_batchnorm_in_a_form_that_never_reads_its_statistics_is_refused(tmp_path, attr, value, message):
    """A BatchNormalization whose attributes change what its statistics mean (ONNX spec:
    training_mode = 1 normalises with the batch's statistics; spatial = 0 keeps them per activation)
    is refused with exit 4, naming the node, and nothing is written."""
    m = onnx.load(branchy_model(tmp_path / "m.onnx"))
    node = next(n for n in m.graph.node if n.name == "bn_b")
    node.attribute.append(helper.make_attribute(attr, value))
    if attr == "training_mode":  # the opset where training_mode exists
        m.opset_import[0].version = 15
    onnx.save(m, tmp_path / "odd.onnx")
    out = tmp_path / "out.onnx"
    p = polish(tmp_path / "odd.onnx", "-o", out, *data_args(tmp_path), check=False)
    assert p.returncode == 4, p.stderr
    assert "node 'bn_b' (BatchNormalization) of" in p.stderr and message in p.stderr, p.stderr
    assert not out.exists()
