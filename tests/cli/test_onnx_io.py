"""lib/onnx through prune-rate: external data in and out, metadata preserved, models over 2 GiB."""
import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hpcnn_test import Builder, assert_close, ort_run, prune


def small_model():
    b = Builder(21)
    x = b.op("Relu", [b.bn(b.conv("x", 3, 16, name="c1"), 16)])
    x = b.op("Relu", [b.conv(x, 16, 16, name="c2")])
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    m = b.model(b.gemm(x, 16, 4, name="fc"), [1, 3, 6, 6])
    m.producer_name, m.producer_version, m.doc_string = "hpcnn-test", "9.9", "a documented model"
    helper.set_model_props(m, {"author": "tests", "licence": "CC0"})
    return m


def save_external(m, path):
    m = onnx.ModelProto.FromString(m.SerializeToString()) if m.ByteSize() < (1 << 31) else m
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=os.path.basename(path) + ".weights", size_threshold=0)


def test_external_data_in_and_out(tmp_path):
    m = small_model()
    (src_dir := tmp_path / "src").mkdir()
    save_external(m, src_dir / "m.onnx")
    dst = tmp_path / "out" / "p.onnx"
    dst.parent.mkdir()
    prune(src_dir / "m.onnx", dst, "--threshold", "0")
    assert (tmp_path / "out" / "p.onnx.data").exists()  # the input had external data, so does the output
    loaded = onnx.load(dst)  # resolves p.onnx.data relative to the model's folder
    assert any(t.data_location == TensorProto.EXTERNAL for t in onnx.load(dst, load_external_data=False).graph.initializer)
    (a,), feeds = ort_run(m)
    (b,), _ = ort_run(loaded, feeds)
    assert_close(b, a)
    # Moving the pair elsewhere keeps it loadable (relative location).
    (moved := tmp_path / "moved").mkdir()
    shutil.move(dst, moved / "p.onnx")
    shutil.move(str(dst) + ".data", moved / "p.onnx.data")
    (c,), _ = ort_run(str(moved / "p.onnx"), feeds)
    assert_close(c, a)


@pytest.mark.parametrize("mode,external", [("never", False), ("always", True)])
def test_external_data_flag(tmp_path, mode, external):
    m = small_model()
    onnx.save(m, tmp_path / "m.onnx")
    prune(tmp_path / "m.onnx", tmp_path / "p.onnx", "--threshold", "0.01", "--external-data", mode)
    assert (tmp_path / "p.onnx.data").exists() == external
    onnx.checker.check_model(str(tmp_path / "p.onnx"), full_check=True)
    ort_run(str(tmp_path / "p.onnx"))


def test_metadata_and_versions_preserved(tmp_path):
    m = small_model()
    onnx.save(m, tmp_path / "m.onnx")
    prune(tmp_path / "m.onnx", tmp_path / "p.onnx", "--threshold", "0.02")
    p = onnx.load(tmp_path / "p.onnx")
    assert p.ir_version == m.ir_version
    assert [(o.domain, o.version) for o in p.opset_import] == [(o.domain, o.version) for o in m.opset_import]
    assert (p.producer_name, p.producer_version, p.doc_string) == ("hpcnn-test", "9.9", "a documented model")
    assert {e.key: e.value for e in p.metadata_props} == {"author": "tests", "licence": "CC0"}


def test_over_2gib_goes_to_external_data(tmp_path):
    """A model whose weights exceed protobuf's 2 GiB limit is written with external data."""
    free = shutil.disk_usage(tmp_path).free
    if free < 8 << 30:
        pytest.skip(f"needs 8 GiB free in {tmp_path}, has {free >> 30} GiB")
    k, n = 24576, 22000  # 2.01 GiB of float32 weights in one Gemm, written as external data
    src = tmp_path / "big.onnx"
    weights = tmp_path / "big.bin"
    with open(weights, "wb") as f:
        for i in range(n):
            np.full(k, 0.002 if i < n // 2 else 0.001, dtype=np.float32).tofile(f)

    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[n, k], data_location=TensorProto.EXTERNAL)
    for key, v in (("location", "big.bin"), ("offset", "0"), ("length", str(n * k * 4))):
        e = w.external_data.add()
        e.key, e.value = key, v
    w2 = np.random.default_rng(0).standard_normal((3, n)).astype(np.float32) * 0.01
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc1", transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2"], ["y"], name="fc2", transB=1)]
    inits = [w, numpy_helper.from_array(np.zeros(n, np.float32), "b"), numpy_helper.from_array(w2, "w2")]
    g = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, src)
    dst = tmp_path / "big_pruned.onnx"
    report = prune(src, dst, "--threshold", "0", "--external-data", "auto")
    assert report["totals"]["params_after"] == n * k + n + 3 * n
    assert (tmp_path / "big_pruned.onnx.data").stat().st_size >= n * k * 4
    x = {"x": np.ones((1, k), np.float32)}
    (a,), _ = ort_run(str(src), x)
    (b,), _ = ort_run(str(dst), x)
    assert_close(b, a)
