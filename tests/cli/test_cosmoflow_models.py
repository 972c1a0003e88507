"""configs/cosmoflow/make_models.py (the CosmoFlow reference network, MLPerf HPC) run as a user runs it:
the parameter count of every written model against a closed form derived here from the reference's
layer list, 8.91 M for 128^3 with 3^3 kernels and 1.34 M for 32^3, the [N, 4] output bounded by 1.2
(tanh x 1.2) in onnxruntime on random inputs, and SAME padding that halves the spatial size exactly at
every pool (the even kernel of v0.7 included), from onnx's shape inference. No 128^3 inference."""
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hpcnn_test import ort_run  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "cosmoflow", "make_models.py")
SIZES, KERNELS = (32, 64, 128), (3, 2)
NOT_TRAINED = {"dropout.ratio", "scale.value"}


def closed_form(S, k):
    """Parameters of the reference network for S^3 inputs and kernel k:
    L = log2(S) - 2 conv blocks, c_0 = 4 input channels, c_i = 32 * 2^(i-1) filters (i = 1..L);
    conv i: k^3 c_{i-1} c_i weights + c_i biases; after L pools of 2 the map is (S / 2^L)^3 = 4^3,
    so fc1 has 64 c_L inputs: (64 c_L + 1) * 128; fc2 (128 + 1) * 64; fc3 (64 + 1) * 4."""
    L = int(np.log2(S)) - 2
    c = [4] + [32 * 2 ** (i - 1) for i in range(1, L + 1)]
    conv = sum(k ** 3 * c[i - 1] * c[i] + c[i] for i in range(1, L + 1))
    return conv + (64 * c[L] + 1) * 128 + (128 + 1) * 64 + (64 + 1) * 4


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = tmp_path_factory.mktemp("cosmoflow")
    p = subprocess.run([sys.executable, SCRIPT, str(out), "--seed", "3"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    printed = {line.split(":")[0]: int(line.split(":")[1].split()[0]) for line in p.stdout.splitlines()}
    return {(S, k): os.path.join(out, f"cosmoflow_{S}_k{k}.onnx") for S in SIZES for k in KERNELS}, printed


def params(model):
    return sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.name not in NOT_TRAINED)


def test_parameter_counts(models):
    paths, printed = models
    for (S, k), path in paths.items():
        m = onnx.load(path)
        onnx.checker.check_model(m)
        assert m.ir_version == 8 and m.opset_import[0].version == 13
        assert params(m) == closed_form(S, k) == printed[path], (S, k)
    assert closed_form(128, 3) == 8_907_556 and round(closed_form(128, 3) / 1e6, 2) == 8.91
    assert closed_form(32, 3) == 1_337_380 and round(closed_form(32, 3) / 1e6, 2) == 1.34
    # The 32^3 model's fc1 sees 128 x 4^3 = 8,192 features: 1,048,704 of its 1.34 M parameters.
    fc1 = next(t for t in onnx.load(paths[(32, 3)]).graph.initializer if t.name == "fc1.weight")
    assert list(fc1.dims) == [128, 128 * 4 ** 3]


def test_no_batchnorm_and_reference_ops(models):
    paths, _ = models
    m = onnx.load(paths[(64, 3)])
    ops = [n.op_type for n in m.graph.node]
    assert "BatchNormalization" not in ops
    assert ops.count("Conv") == ops.count("MaxPool") == 4 and ops.count("Gemm") == 3
    assert ops[-2:] == ["Tanh", "Mul"]
    alphas = [a.f for n in m.graph.node if n.op_type == "LeakyRelu" for a in n.attribute if a.name == "alpha"]
    assert len(alphas) == 6 and all(abs(a - 0.3) < 1e-7 for a in alphas)


@pytest.mark.parametrize("S,k", [(S, k) for S in SIZES for k in KERNELS])
def test_spatial_size_halves_at_each_pool(models, S, k):
    m = onnx.shape_inference.infer_shapes(onnx.load(models[0][(S, k)]), strict_mode=True)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(m.graph.value_info) + list(m.graph.output)}
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    pools = [n for n in m.graph.node if n.op_type == "MaxPool"]
    assert len(convs) == len(pools) == int(np.log2(S)) - 2
    for i, (c, p) in enumerate(zip(convs, pools)):
        attrs = {a.name: a for a in c.attribute}
        pads = list(attrs["pads"].ints) if "pads" in attrs else None
        auto = attrs["auto_pad"].s.decode() if "auto_pad" in attrs else "NOTSET"
        assert auto == "SAME_UPPER" or pads == [(k - 1) // 2] * 3 + [k - 1 - (k - 1) // 2] * 3, (pads, auto)
        assert shapes[c.output[0]][2:] == [S >> i] * 3  # SAME: the conv keeps the size
        assert shapes[p.output[0]][2:] == [S >> (i + 1)] * 3
    assert shapes[pools[-1].output[0]][2:] == [4, 4, 4]
    assert shapes["output"][1] == 4


@pytest.mark.parametrize("S,k", [(32, 3), (32, 2), (64, 2)])
def test_output_shape_and_bound(models, S, k):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 4, S, S, S)) * 20).astype(np.float32)  # large inputs drive tanh to its limits
    (out,), _ = ort_run(models[0][(S, k)], {"input": x})
    assert out.shape == (3, 4)
    assert np.all(np.abs(out) <= 1.2 + 1e-6)


def test_dropout_ratio_option(tmp_path, models):
    """--dropout R: both Dropout ratios R, the same initial weights as the reference model of the
    seed, the file named _dropout<R>; a ratio outside [0, 1) is refused and writes nothing."""
    p = subprocess.run([sys.executable, SCRIPT, str(tmp_path), "--seed", "3", "--sizes", "32", "--kernels", "3",
                        "--dropout", "0"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    m = onnx.load(str(tmp_path / "cosmoflow_32_k3_dropout0.onnx"))
    ref = onnx.load(models[0][(32, 3)])
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    ref_inits = {t.name: onnx.numpy_helper.to_array(t) for t in ref.graph.initializer}
    assert inits["dropout.ratio"] == 0 and ref_inits["dropout.ratio"] == 0.5
    assert [n.input[1] for n in m.graph.node if n.op_type == "Dropout"] == ["dropout.ratio"] * 2
    for name, a in ref_inits.items():
        if name != "dropout.ratio":
            np.testing.assert_array_equal(inits[name], a, err_msg=name)
    bad = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "bad"), "--sizes", "32", "--dropout", "1"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--dropout must be in [0, 1), got 1.0" in bad.stderr
    assert not (tmp_path / "bad").exists()
