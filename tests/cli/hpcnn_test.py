"""Shared helpers for the tool tests: running the built tools, building small ONNX models,
and independent references (numpy and onnxruntime) for what the tools compute."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from onnx_builder import GraphBuilder  # noqa: E402

BIN_DIR = os.environ.get("HPCNN_BIN_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build", "tools"))
FIXTURE_DIR = os.environ.get("HPCNN_FIXTURE_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build", "fixtures"))
RTOL, ATOL = 1e-4, 1e-5
MPIRUN = os.environ.get("HPCNN_MPIRUN", shutil.which("mpirun") or "mpirun")


def launch(ranks, *mpirun_args):
    """The prefix that runs a tool on `ranks` ranks under mpirun (as root in containers, more ranks
    than cores): the one launch line of the tests (the scripts' twins: scripts/tools.sh,
    scripts/hpcnn_tools.py)."""
    return [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), *map(str, mpirun_args)]


def tool(name):
    return os.path.join(BIN_DIR, name, name)


def run(name, *args, check=True, **kw):
    p = subprocess.run([tool(name), *map(str, args)], capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{name} {' '.join(map(str, args))} exited {p.returncode}:\n{p.stderr}")
    return p


def prune(model, out, *args, check=True):
    p = run("prune-rate", model, "-o", out, "-f", *args, check=check)
    return json.loads(p.stdout) if p.returncode == 0 else p


# ---- onnxruntime -----------------------------------------------------------------------------
def ort_run(model_or_path, feeds=None, seed=0):
    data = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else model_or_path
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    if feeds is None:
        rng = np.random.default_rng(seed)
        inits = set()
        m = onnx.load(model_or_path) if isinstance(model_or_path, str) else model_or_path
        inits = {t.name for t in m.graph.initializer}
        feeds = {}
        for i in sess.get_inputs():
            if i.name in inits:
                continue
            shape = [d if isinstance(d, int) else 1 for d in i.shape]
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return sess.run(None, feeds), feeds


def assert_close(a, b):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


# ---- independent cost counting ------------------------------------------------------------------
def float_constants(model):
    """(name, ndarray-shape) of every floating-point constant tensor: initializers, Constant
    values and ConstantOfShape outputs."""
    g = model.graph
    floats = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)
    out = [(t.name, list(t.dims)) for t in g.initializer if t.data_type in floats]
    inits = {t.name: t for t in g.initializer}
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and a.t.data_type in floats:
                    out.append((n.output[0], list(a.t.dims)))
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            out.append((n.output[0], list(numpy_helper.to_array(inits[n.input[0]]))))
    return out


def count_params(model):
    return int(sum(int(np.prod(s)) for _, s in float_constants(model)))


def count_macs(model):
    """MACs of Conv / Gemm / MatMul with constant weights at the model's input shape
    (symbolic dims as 1), from onnx's shape inference."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    for v in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        shapes[v.name] = [d.dim_value if d.HasField("dim_value") else 1 for d in v.type.tensor_type.shape.dim]
    wshape = dict(float_constants(model))
    total = 0
    for n in model.graph.node:
        if n.op_type not in ("Conv", "Gemm", "MatMul") or n.input[1] not in wshape:
            continue
        w = wshape[n.input[1]]
        if n.op_type == "Conv":
            out = shapes[n.output[0]]
            total += out[0] * int(np.prod(out[2:])) * int(np.prod(w))
        elif n.op_type == "Gemm":
            trans_a = any(a.name == "transA" and a.i for a in n.attribute)
            total += shapes[n.input[0]][1 if trans_a else 0] * w[0] * w[1]
        else:
            total += int(np.prod(shapes[n.output[0]][:-1])) * w[0] * w[1]
    return total


# ---- model building --------------------------------------------------------------------------
class Builder(GraphBuilder):
    """Small CNN graphs with seeded weights whose filter scales differ (so L1 norms differ); values
    named <kind><n> (scripts/onnx_builder.py holds the graph). weights_as="constant": float weights
    as Constant nodes instead of initializers."""

    def __init__(self, seed=0, weights_as="initializer"):
        super().__init__(seed=seed)
        self.weights_as = weights_as

    def const(self, name, arr):
        arr = np.asarray(arr)
        if self.weights_as == "constant" and arr.dtype == np.float32:
            return self.constant(name, arr)
        return self.init(name, arr)

    def weight(self, shape, out_axis=0):
        w = self.rng.standard_normal(shape).astype(np.float32)
        scale_shape = [1] * len(shape)
        scale_shape[out_axis] = shape[out_axis]
        w *= np.exp(self.rng.standard_normal(scale_shape)).astype(np.float32)
        return (w / np.sqrt(np.prod(shape) / shape[out_axis])).astype(np.float32)

    def conv(self, x, cin, cout, k=3, group=1, bias=True, name=None):
        name = name or self.name("conv")
        w = self.const(name + ".weight", self.weight((cout, cin // group, k, k)))
        ins = [x, w]
        if bias:
            ins.append(self.const(name + ".bias", (self.rng.standard_normal(cout) * 0.1).astype(np.float32)))
        return self.add_node("Conv", ins, [name], name=name, pads=[k // 2] * 4, group=group)

    def bn(self, x, c):
        name = self.name("bn")
        p = [self.const(f"{name}.{k}", v.astype(np.float32)) for k, v in (
            ("scale", self.rng.uniform(0.5, 1.5, c)), ("bias", self.rng.standard_normal(c) * 0.1),
            ("mean", self.rng.standard_normal(c) * 0.1), ("var", self.rng.uniform(0.5, 1.5, c)))]
        return self.add_node("BatchNormalization", [x] + p, [name], name=name)

    def op(self, op, inputs, **attrs):
        name = self.name(op.lower())
        return self.add_node(op, inputs, [name], name=name, **attrs)

    def gemm(self, x, k, n, trans_b=1, name=None):
        name = name or self.name("fc")
        w = self.weight((n, k), 0) if trans_b else self.weight((k, n), 1)
        b = self.const(name + ".bias", (self.rng.standard_normal(n) * 0.1).astype(np.float32))
        return self.add_node("Gemm", [x, self.const(name + ".weight", w), b], [name], name=name, transB=trans_b)

    def matmul(self, x, k, n, name=None):
        name = name or self.name("mm")
        w = self.const(name + ".weight", self.weight((k, n), 1))
        return self.add_node("MatMul", [x, w], [name], name=name)

    def model(self, out, in_shape, opset=13, ir=8, inits_as_inputs=False):
        return self.build([("x", in_shape)], [(out, None)], opset, ir_version=ir, inits_as_inputs=inits_as_inputs,
                          infer_outputs=True)


def weights_of(model):
    """name -> ndarray for initializers and Constant values."""
    out = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    out[n.output[0]] = numpy_helper.to_array(a.t)
    return out


def set_weight(model, name, arr):
    for t in model.graph.initializer:
        if t.name == name:
            t.CopyFrom(numpy_helper.from_array(arr.astype(numpy_helper.to_array(t).dtype), name))
            return
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output[0] == name:
            for a in n.attribute:
                if a.name == "value":
                    a.t.CopyFrom(numpy_helper.from_array(arr, name))
                    return
    raise KeyError(name)
