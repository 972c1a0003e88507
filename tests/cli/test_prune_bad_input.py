"""prune-rate on bad input: a clear message, a non-zero exit, no output and no temporary file."""
import json
import os

import numpy as np
import onnx
import pytest

from hpcnn_test import Builder, run


@pytest.fixture
def model_path(tmp_path):
    b = Builder(11)
    x = b.op("Relu", [b.conv("x", 3, 8, name="c1")])
    x = b.op("Flatten", [b.op("GlobalAveragePool", [b.op("Relu", [b.conv(x, 8, 8, name="c2")])])])
    p = tmp_path / "in" / "m.onnx"
    p.parent.mkdir()
    onnx.save(b.model(b.gemm(x, 8, 4, name="fc"), [1, 3, 6, 6]), p)
    return p


def fails(args, code, *words, out_dir):
    before = set(os.listdir(out_dir))
    p = run("prune-rate", *args, "-o", out_dir / "out.onnx", check=False)
    assert p.returncode == code, (p.returncode, p.stderr)
    assert p.stderr.startswith("prune-rate: error: "), p.stderr
    for w in words:
        assert w in p.stderr, (w, p.stderr)
    assert p.stdout == ""
    assert set(os.listdir(out_dir)) == before  # no output, no temporary file
    return p


def test_missing_file(tmp_path):
    fails([tmp_path / "nope.onnx", "--threshold", "0.1"], 3, "nope.onnx", out_dir=tmp_path)


def test_directory_as_model(tmp_path):
    fails([tmp_path, "--threshold", "0.1"], 3, "is a directory", out_dir=tmp_path)


def test_empty_file(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    fails([tmp_path / "empty.onnx", "--threshold", "0.1"], 2, "empty.onnx", "empty", out_dir=tmp_path)


def test_random_bytes(tmp_path):
    (tmp_path / "r.onnx").write_bytes(np.random.default_rng(0).bytes(4096))
    fails([tmp_path / "r.onnx", "--threshold", "0.1"], 2, "r.onnx", out_dir=tmp_path)


def test_truncated_models(model_path, tmp_path):
    data = model_path.read_bytes()
    for cut in sorted({1, 7, 50, len(data) // 3, len(data) // 2, len(data) - 40, len(data) - 5, len(data) - 1}):
        t = tmp_path / f"cut{cut}.onnx"
        t.write_bytes(data[:cut])
        fails([t, "--threshold", "0.1"], 2, f"cut{cut}.onnx", out_dir=tmp_path)
        t.unlink()


def test_truncated_graph_names_the_node(model_path, tmp_path):
    m = onnx.load(model_path)
    del m.graph.node[0]  # c1 removed: its consumer reads an undefined value
    p = tmp_path / "t.onnx"
    onnx.save(m, p)
    fails([p, "--threshold", "0.1"], 2, "reads 'c1'", out_dir=tmp_path)


def test_corrupt_weight_size(model_path, tmp_path):
    m = onnx.load(model_path)
    t = next(t for t in m.graph.initializer if t.name == "c2.weight")
    t.raw_data = t.raw_data[:-4]
    p = tmp_path / "w.onnx"
    onnx.save(m, p)
    fails([p, "--threshold", "0.1"], 2, "c2.weight", out_dir=tmp_path)


def test_opset_too_old(model_path, tmp_path):
    m = onnx.load(model_path)
    m.opset_import[0].version = 6
    p = tmp_path / "o.onnx"
    onnx.save(m, p)
    fails([p, "--threshold", "0.1"], 4, "opset 6", out_dir=tmp_path)


@pytest.mark.parametrize("args,words", [
    (["--threshold", "-1"], ["--threshold"]),
    (["--threshold", "nan"], ["--threshold"]),
    (["--threshold", "abc"], ["--threshold"]),
    ([], ["--threshold"]),
    (["--threshold", "0.1", "--target-params-reduction", "0.5"], ["exclude"]),
    (["--target-macs-reduction", "1.5"], ["(0, 1)"]),
    (["--target-params-reduction", "0"], ["(0, 1)"]),
    (["--rate", "1"], ["--rate", "[0, 1)"]),
    (["--rate", "-0.1"], ["--rate", "[0, 1)"]),
    (["--rate", "0.5", "--threshold", "0.1"], ["exclude"]),
    (["--rate", "0.5", "--target-macs-reduction", "0.5"], ["exclude"]),
    (["--threshold", "0.1", "--rates", "0,1.5"], ["outside [0, 1)"]),
    (["--threshold", "0.1", "--rates", "0.5,0.2"], ["ascending"]),
    (["--threshold", "0.1", "--rates", "0,x"], ["'x' is not a number"]),
    (["--threshold", "0.1", "--rates", ""], ["--rates"]),
    (["--threshold", "0.1", "--external-data", "sometimes"], ["--external-data"]),
    (["--threshold", "0.1", "--no-such-flag"], ["--no-such-flag"]),
])
def test_invalid_options(model_path, tmp_path, args, words):
    fails([model_path, *args], 1, *words, out_dir=tmp_path)


@pytest.mark.parametrize("text,code,word", [
    ("{not json", 2, "not valid JSON"),
    ('["c1"]', 2, "JSON object"),
    ('{"c1": -0.5}', 2, "'c1'"),
    ('{"c1": "big"}', 2, "'c1'"),
])
def test_bad_thresholds_file(model_path, tmp_path, text, code, word):
    f = tmp_path / "th.json"
    f.write_text(text)
    fails([model_path, "--thresholds", f], code, word, "th.json", out_dir=tmp_path)
    f.unlink()


def test_missing_thresholds_file(model_path, tmp_path):
    fails([model_path, "--thresholds", tmp_path / "none.json"], 3, "none.json", out_dir=tmp_path)


def test_missing_output_folders_are_created(model_path, tmp_path):
    """The one output rule of every tool: missing parent folders are created (mkdir -p)."""
    out, rep = tmp_path / "a" / "b" / "out.onnx", tmp_path / "r" / "rep.json"
    run("prune-rate", model_path, "--threshold", "0.1", "-o", out, "--report", rep)
    onnx.checker.check_model(onnx.load(out))
    assert json.loads(rep.read_text())["output"] == str(out)


def test_output_folder_is_a_file(model_path, tmp_path):
    (tmp_path / "no").write_bytes(b"a file")
    p = run("prune-rate", model_path, "--threshold", "0.1", "-o", tmp_path / "no" / "out.onnx", check=False)
    assert p.returncode == 3 and str(tmp_path / "no") in p.stderr and "not a folder" in p.stderr and p.stdout == ""


def test_existing_output_needs_force(model_path, tmp_path):
    out = tmp_path / "out.onnx"
    out.write_bytes(b"keep me")
    p = run("prune-rate", model_path, "--threshold", "0.1", "-o", out, check=False)
    assert p.returncode == 3 and "-f" in p.stderr
    assert out.read_bytes() == b"keep me"
    p = run("prune-rate", model_path, "--threshold", "0.1", "-o", out, "-f")
    onnx.checker.check_model(onnx.load(out))


def test_output_is_input(model_path, tmp_path):
    before = model_path.read_bytes()
    p = run("prune-rate", model_path, "--threshold", "0.1", "-o", model_path, "-f", check=False)
    assert p.returncode == 1 and "is the input" in p.stderr
    assert model_path.read_bytes() == before


@pytest.mark.parametrize("location,code,word", [
    ("../outside.bin", 2, "'..'"),
    ("/etc/passwd", 2, "absolute"),
    ("missing.bin", 3, "missing.bin"),
    ("short.bin", 2, "short.bin"),
])
def test_bad_external_data(model_path, tmp_path, location, code, word):
    m = onnx.load(model_path)
    t = next(t for t in m.graph.initializer if t.name == "c2.weight")
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0")):
        e = t.external_data.add()
        e.key, e.value = k, v
    d = tmp_path / "ext"
    d.mkdir()
    (d / "short.bin").write_bytes(b"\0" * 16)
    onnx.save(m, d / "m.onnx")
    fails([d / "m.onnx", "--threshold", "0.1"], code, word, "c2.weight", out_dir=tmp_path)


def test_conv_input_of_wrong_rank(model_path, tmp_path):
    """libonnx's own shape inference crashes on this; prune-rate must report it instead."""
    m = onnx.load(model_path)
    del m.graph.input[0].type.tensor_type.shape.dim[2:]  # x: [1, 3] instead of [1, 3, 6, 6]
    p = tmp_path / "rank.onnx"
    onnx.save(m, p)
    fails([p, "--threshold", "0.1"], 2, "rank.onnx", "shape inference", out_dir=tmp_path)


def test_report_never_overwrites_the_model_or_output(model_path, tmp_path):
    before = model_path.read_bytes()
    p = run("prune-rate", model_path, "--threshold", "0.1", "--report", model_path, "-f", check=False)
    assert p.returncode == 1 and "is the input" in p.stderr
    assert model_path.read_bytes() == before
    out = tmp_path / "o.onnx"
    p = run("prune-rate", model_path, "--threshold", "0.1", "-o", out, "--report", out, check=False)
    assert p.returncode == 1 and not out.exists()


def test_report_folder_unusable_leaves_no_model(model_path, tmp_path):
    out = tmp_path / "o.onnx"
    (tmp_path / "no").write_bytes(b"a file")
    p = run("prune-rate", model_path, "--threshold", "0.1", "-o", out, "--report", tmp_path / "no" / "r.json", check=False)
    assert p.returncode == 3 and not out.exists() and sorted(os.listdir(tmp_path)) == ["in", "no"]


def test_thresholds_number_overflow(model_path, tmp_path):
    f = tmp_path / "th.json"
    f.write_text('{"c1": 1e400}')
    fails([model_path, "--thresholds", f], 2, "th.json", out_dir=tmp_path)
    f.unlink()
