#!/usr/bin/env python3
"""Writes whole-model test cases for the training engine, in the ONNX backend test layout.

  OUT/CASE/model.onnx, OUT/CASE/test_data_set_0/input_0.pb, output_0.pb, ...; OUT/CASE/case.json

Cases (expected outputs computed by onnxruntime, CPU, graph optimizations off):
  light_resnet50, light_vgg19, light_squeezenet
      the onnx package's model-zoo 'light' graphs (opset 9, IR version 3) with the seeded random
      weights of scripts/make_light_models.py, rescaled so that activations stay near unit
      scale (see rescale()); input N(0, 1) of batch 1 (the graphs fix it);
      outputs: the graph's softmax and, added as a second graph output, the logits feeding it
      (the probabilities alone hide small errors).
  cnn_bn_opset7, cnn_bn_opset15
      Conv(+bias) BatchNormalization Relu MaxPool Conv(stride 2, no bias) BatchNormalization
      LeakyRelu [Dropout at opset 7] Flatten Gemm(transB); opset 7 as IR version 3 (initializers
      also graph inputs).
  resnet_block_opset9, resnet_block_opset17
      stem Conv BN Relu; residual block (3x3 stride-2 conv, BN, Relu, 3x3 conv with
      auto_pad SAME_UPPER, BN) plus a 1x1 stride-2 projection; Add Relu GlobalAveragePool;
      Reshape to a Constant-node shape [0, -1]; MatMul Add Sub Mul with constants.
  mobile_concat_opset10, mobile_concat_opset21
      pointwise Conv Clip(0, 6) (attributes at opset 10, inputs from 11), depthwise Conv
      (dilation 2), grouped Conv (group 3), x*Sigmoid(x), Concat, AveragePool with and without
      count_include_pad, Sum, 1x1 Conv whose bias is a ConstantOfShape, Softmax(axis=1) on a 4-D
      tensor (opset 10 flattens to 2-D from axis 1; opset 13+ normalises over the channel axis).
Each small CNN has batch 2, seeded N(0, 1) inputs and a second output inside the network.

Idempotent: a case whose case.json records the same onnx/onnxruntime versions and script is
kept. VGG-19 alone is 575 MB: write it into a build directory, never into the repository.

usage: make_model_cases.py OUT_DIR [--cases light,small | NAME,...] [--seed 0]
"""
import argparse
import hashlib
import json
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_light_models  # noqa: E402

LIGHT = ["light_resnet50", "light_vgg19", "light_squeezenet"]
SMALL = ["cnn_bn_opset7", "cnn_bn_opset15", "resnet_block_opset9", "resnet_block_opset17",
         "mobile_concat_opset10", "mobile_concat_opset21"]


def log(msg):
    print(f"make_model_cases: {msg}", file=sys.stderr)


def seed_of(name, seed):
    return int.from_bytes(hashlib.sha256(f"{name}:{seed}".encode()).digest()[:4], "little")


# ---- small CNNs ---------------------------------------------------------------------------
class Builder:
    def __init__(self, rng):
        self.rng, self.nodes, self.inits, self.n = rng, [], [], 0

    def name(self, prefix):
        self.n += 1
        return f"{prefix}{self.n}"

    def init(self, prefix, array):
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, inputs, outputs=1, **attrs):
        outs = [self.name(op.lower() + "_") for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op + "_node"), **attrs))
        return outs[0] if outputs == 1 else outs

    def conv(self, x, cin, cout, k, bias=True, group=1, **attrs):
        fan_in = cin // group * k * k
        w = self.init("W", (self.rng.standard_normal((cout, cin // group, k, k)) *
                            np.sqrt(2.0 / fan_in)).astype(np.float32))
        ins = [x, w]
        if bias:
            ins.append(self.init("B", (self.rng.standard_normal(cout) * 0.1).astype(np.float32)))
        return self.node("Conv", ins, kernel_shape=[k, k], group=group, **attrs)

    def bn(self, x, c, opset):
        r = self.rng
        ins = [x, self.init("bn_scale", r.uniform(0.5, 1.5, c).astype(np.float32)),
               self.init("bn_bias", (r.standard_normal(c) * 0.1).astype(np.float32)),
               self.init("bn_mean", (r.standard_normal(c) * 0.1).astype(np.float32)),
               self.init("bn_var", r.uniform(0.5, 1.5, c).astype(np.float32))]
        attrs = {"epsilon": 1e-5, "momentum": 0.9}
        if opset < 9:
            attrs["spatial"] = 1
        return self.node("BatchNormalization", ins, **attrs)

    def const(self, array):
        """A Constant node (not an initializer)."""
        out = self.name("const_")
        self.nodes.append(helper.make_node("Constant", [], [out], name=self.name("Constant_node"),
                                           value=numpy_helper.from_array(np.asarray(array), out + "_value")))
        return out

    def model(self, name, inputs, outputs, opset, ir3=False):
        graph = helper.make_graph(self.nodes, name,
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                                  initializer=self.inits)
        if ir3:
            graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in self.inits)
        ir = 3 if ir3 else min(r[1] for r in helper.VERSION_TABLE if r[2] >= opset)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir,
                                  producer_name="hpcnn make_model_cases")
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        shapes = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
        for vi in model.graph.output:
            vi.CopyFrom(shapes[vi.name])
        onnx.checker.check_model(model, full_check=True)
        return model


def cnn_bn(opset, rng):
    b = Builder(rng)
    h = b.conv("x", 3, 8, 3, pads=[1, 1, 1, 1])
    act1 = b.node("Relu", [b.bn(h, 8, opset)])
    h = b.node("MaxPool", [act1], kernel_shape=[2, 2], strides=[2, 2])
    h = b.conv(h, 8, 16, 3, bias=False, strides=[2, 2], pads=[1, 1, 1, 1])
    h = b.node("LeakyRelu", [b.bn(h, 16, opset)], alpha=0.1)
    if opset < 12:
        h = b.node("Dropout", [h], ratio=0.3)
    h = b.node("Flatten", [h], axis=1)
    w = b.init("fc_W", (rng.standard_normal((10, 256)) * np.sqrt(1.0 / 256)).astype(np.float32))
    c = b.init("fc_C", (rng.standard_normal(10) * 0.1).astype(np.float32))
    logits = b.node("Gemm", [h, w, c], transB=1)
    return b.model(f"cnn_bn_opset{opset}", [("x", [2, 3, 16, 16])], [logits, act1], opset, ir3=opset < 9)


def resnet_block(opset, rng):
    b = Builder(rng)
    h = b.node("Relu", [b.bn(b.conv("x", 4, 8, 3, pads=[1, 1, 1, 1]), 8, opset)])
    r = b.node("Relu", [b.bn(b.conv(h, 8, 8, 3, bias=False, strides=[2, 2], pads=[1, 1, 1, 1]), 8, opset)])
    r = b.bn(b.conv(r, 8, 8, 3, bias=False, auto_pad="SAME_UPPER"), 8, opset)
    s = b.conv(h, 8, 8, 1, bias=False, strides=[2, 2])
    added = b.node("Add", [r, s])
    h = b.node("GlobalAveragePool", [b.node("Relu", [added])])
    h = b.node("Reshape", [h, b.const(np.array([0, -1], dtype=np.int64))])
    h = b.node("MatMul", [h, b.init("mm_W", (rng.standard_normal((8, 5)) * 0.5).astype(np.float32))])
    h = b.node("Add", [h, b.init("mm_b", (rng.standard_normal(5) * 0.1).astype(np.float32))])
    h = b.node("Sub", [h, b.init("sub_c", (rng.standard_normal((1, 5)) * 0.1).astype(np.float32))])
    out = b.node("Mul", [h, b.init("mul_c", np.array(1.5, dtype=np.float32))])
    return b.model(f"resnet_block_opset{opset}", [("x", [2, 4, 12, 12])], [out, added], opset)


def mobile_concat(opset, rng):
    b = Builder(rng)

    def relu6(x):
        if opset < 11:
            return b.node("Clip", [x], min=0.0, max=6.0)
        return b.node("Clip", [x, b.init("clip_min", np.array(0.0, dtype=np.float32)),
                               b.init("clip_max", np.array(6.0, dtype=np.float32))])

    h = relu6(b.conv("x", 6, 12, 1))
    d = relu6(b.conv(h, 12, 12, 3, group=12, pads=[2, 2, 2, 2], dilations=[2, 2]))
    g = b.conv(h, 12, 12, 3, group=3, pads=[1, 1, 1, 1])
    g = b.node("Mul", [g, b.node("Sigmoid", [g])])
    cat = b.node("Concat", [d, g], axis=1)
    ap1 = b.node("AveragePool", [cat], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)
    ap0 = b.node("AveragePool", [cat], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    s = b.node("Sum", [ap1, ap0])
    w = b.init("head_W", (rng.standard_normal((4, 24, 1, 1)) * np.sqrt(2.0 / 24)).astype(np.float32))
    bias = b.node("ConstantOfShape", [b.const(np.array([4], dtype=np.int64))],
                  value=numpy_helper.from_array(np.array([0.1], dtype=np.float32), "v"))
    h = b.node("Conv", [s, w, bias], kernel_shape=[1, 1])
    prob = b.node("Softmax", [h], axis=1)
    return b.model(f"mobile_concat_opset{opset}", [("x", [2, 6, 10, 10])], [prob, cat], opset)


def small_model(name, rng):
    kind, opset = name.rsplit("_opset", 1)
    return {"cnn_bn": cnn_bn, "resnet_block": resnet_block, "mobile_concat": mobile_concat}[kind](int(opset), rng)


# ---- light models --------------------------------------------------------------------------
SCALED = ("Conv", "Gemm", "BatchNormalization")
SCALE_PRESERVING = ("Relu", "MaxPool", "AveragePool", "GlobalAveragePool", "Dropout", "Flatten", "Reshape",
                    "Identity", "Concat", "Sum", "Add")


def rescale(model, feeds):
    """Rescales the weights so that every Conv/Gemm/BatchNormalization output has a standard
    deviation near 1 on `feeds` (the random weights of make_light_models.py grow activations
    layer by layer: ResNet-50's logits reach 1e13, where fp32 rounding alone exceeds the
    comparison tolerance). One onnxruntime pass measures each such output's std on the original
    model; each tensor t then gets a scale s_t (original = s_t * new), shared by tensors joined
    through scale-preserving operators (Relu, pooling, Concat, Sum/Add, Flatten, ...), and
      Conv/Gemm:  W' = W * s_in / s_out, B' = B / s_out
      BatchNorm:  scale' = scale * s_in / s_out, B' = B / s_out, mean' = mean / s_in, var' = var
    so that the new network computes exactly original / s_t everywhere before the final Softmax."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(helper.make_tensor_value_info(n.output[0], TensorProto.FLOAT, None)
                              for n in g.node if n.op_type in SCALED)
    got = run_ort(probe, feeds)[len(g.output):]
    std = {n.output[0]: float(np.std(y.astype(np.float64)))
           for n, y in zip([n for n in g.node if n.op_type in SCALED], got)}

    parent = {}

    def find(t):
        while parent.get(t, t) != t:
            t = parent[t]
        return t

    def union(a, b):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb

    for n in g.node:
        if n.op_type in SCALE_PRESERVING:
            ins = n.input[:1] if n.op_type in ("Reshape", "Dropout") else n.input
            for x in ins:
                union(x, n.output[0])
    scale = {find(vi.name): 1.0 for vi in g.input if vi.name not in inits}

    def set_init(name, array):
        inits[name].CopyFrom(numpy_helper.from_array(array.astype(np.float32), name))

    def arr(name):
        return numpy_helper.to_array(inits[name]).astype(np.float64)

    for n in g.node:
        if n.op_type not in SCALED:
            continue
        s_in = scale[find(n.input[0])]
        s_out = scale.setdefault(find(n.output[0]), std[n.output[0]] or 1.0)
        if n.op_type in ("Conv", "Gemm"):
            set_init(n.input[1], arr(n.input[1]) * (s_in / s_out))
            if len(n.input) > 2 and n.input[2]:
                set_init(n.input[2], arr(n.input[2]) / s_out)
        else:
            set_init(n.input[1], arr(n.input[1]) * (s_in / s_out))
            set_init(n.input[2], arr(n.input[2]) / s_out)
            set_init(n.input[3], arr(n.input[3]) / s_in)
    return model


def light_model(name, seed, feeds_for):
    src = os.path.join(make_light_models.LIGHT_DIR, f"{name}.onnx")
    model = make_light_models.materialize(onnx.load(src), seed)
    model = rescale(model, feeds_for(model))
    g = model.graph
    final = next(n for n in g.node if n.output[0] == g.output[0].name)
    if final.op_type == "Softmax":  # also compare the logits (the shape of the probabilities)
        logits = onnx.ValueInfoProto()
        logits.CopyFrom(g.output[0])
        logits.name = final.input[0]
        g.output.append(logits)
    onnx.checker.check_model(model)
    return model


# ---- cases ---------------------------------------------------------------------------------
def input_infos(model):
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def run_ort(model, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def make_feeds(model, name, seed):
    rng = np.random.default_rng(seed_of(name, seed) + 1)
    feeds = {}
    for vi in input_infos(model):
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def write_case(out_dir, name, model, key, seed):
    feeds = make_feeds(model, name, seed)
    outputs = run_ort(model, feeds)
    tmp, dst = os.path.join(out_dir, name + ".tmp"), os.path.join(out_dir, name)
    shutil.rmtree(tmp, ignore_errors=True)
    ds = os.path.join(tmp, "test_data_set_0")
    os.makedirs(ds)
    onnx.save(model, os.path.join(tmp, "model.onnx"))
    for i, vi in enumerate(input_infos(model)):
        onnx.save_tensor(numpy_helper.from_array(feeds[vi.name], vi.name), os.path.join(ds, f"input_{i}.pb"))
    for i, (vi, y) in enumerate(zip(model.graph.output, outputs)):
        onnx.save_tensor(numpy_helper.from_array(y, vi.name), os.path.join(ds, f"output_{i}.pb"))
    with open(os.path.join(tmp, "case.json"), "w") as f:
        json.dump({"key": key, "outputs": [{"name": vi.name, "shape": list(y.shape),
                                            "max_abs": float(np.abs(y).max())}
                                           for vi, y in zip(model.graph.output, outputs)]}, f, indent=1)
    shutil.rmtree(dst, ignore_errors=True)
    os.replace(tmp, dst)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--cases", default="light,small",
                    help="comma-separated case names, or 'light' / 'small' for those groups (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    names = []
    for item in args.cases.split(","):
        group = {"light": LIGHT, "small": SMALL}.get(item, [item])
        for n in group:
            if n not in LIGHT + SMALL:
                sys.exit(f"make_model_cases: unknown case '{n}' (known: {', '.join(LIGHT + SMALL)})")
            names.append(n)
    with open(os.path.abspath(__file__), "rb") as f:
        script = hashlib.sha256(f.read()).hexdigest()[:16]
    with open(os.path.abspath(make_light_models.__file__), "rb") as f:
        script += hashlib.sha256(f.read()).hexdigest()[:16]
    key = {"onnx": onnx.__version__, "onnxruntime": ort.__version__, "script": script, "seed": args.seed}
    os.makedirs(args.out_dir, exist_ok=True)
    for name in names:
        stamp = os.path.join(args.out_dir, name, "case.json")
        if os.path.exists(stamp):
            with open(stamp) as f:
                if json.load(f).get("key") == key:
                    continue
        seed = seed_of(name, args.seed)
        if name in LIGHT:
            model = light_model(name, args.seed, lambda m: make_feeds(m, name, args.seed))
        else:
            model = small_model(name, np.random.default_rng(seed))
        write_case(args.out_dir, name, model, key, args.seed)
        log(f"wrote {os.path.join(args.out_dir, name)}")
    print(f"make_model_cases: {len(names)} cases in {args.out_dir} (onnx {onnx.__version__}, "
          f"onnxruntime {ort.__version__})")


if __name__ == "__main__":
    main()
