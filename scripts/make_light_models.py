#!/usr/bin/env python3
"""Writes the ONNX 'light' model-zoo graphs with seeded random weights.

The onnx PyPI package ships onnx/backend/test/data/light/light_*.onnx: real model-zoo
architectures (ResNet-50, VGG-19, SqueezeNet, AlexNet, ...; opset 9, IR version 3) in which every
weight is a ConstantOfShape node filled with one value. This script replaces each such weight
with a seeded random initializer (listed as a graph input too, as IR version 3 requires):
He-normal weights with a log-normal scale per output filter (so filter L1 norms differ, as in a
trained network), BatchNorm scale/variance in [0.5, 1.5], other vectors N(0, 0.05).

usage: make_light_models.py OUT_DIR [--models resnet50,vgg19,...] [--seed 0]
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def consumers(graph, name):
    return [(n, i) for n in graph.node for i, x in enumerate(n.input) if x == name]


def random_weight(rng, shape, uses):
    shape = tuple(int(d) for d in shape)
    ops = {(n.op_type, i) for n, i in uses}
    if len(shape) >= 2:
        # Conv [Cout, Cin/g, kH, kW] or Gemm B; fan-in and the output axis depend on the use.
        out_axis, fan_in = 0, int(np.prod(shape[1:]))
        for n, i in uses:
            if n.op_type == "Gemm" and i == 1:
                trans_b = any(a.name == "transB" and a.i for a in n.attribute)
                out_axis, fan_in = (0, shape[1]) if trans_b else (1, shape[0])
            if n.op_type == "MatMul" and i == 1:
                out_axis, fan_in = 1, shape[0]
        w = rng.standard_normal(shape) * np.sqrt(2.0 / max(fan_in, 1))
        scale_shape = [1] * len(shape)
        scale_shape[out_axis] = shape[out_axis]
        w *= rng.lognormal(0.0, 0.7, size=scale_shape)
        return w.astype(np.float32)
    if ("BatchNormalization", 1) in ops or ("BatchNormalization", 4) in ops:
        return rng.uniform(0.5, 1.5, size=shape).astype(np.float32)
    return (rng.standard_normal(shape) * 0.05).astype(np.float32)


def materialize(model, seed):
    rng = np.random.default_rng(seed)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    const_shapes = {}
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    const_shapes[n.output[0]] = numpy_helper.to_array(a.t)
    keep_nodes, new_inits, dropped_shapes = [], [], set()
    for n in g.node:
        if n.op_type == "ConstantOfShape":
            src = n.input[0]
            shape = numpy_helper.to_array(inits[src]) if src in inits else const_shapes.get(src)
            if shape is not None:
                w = random_weight(rng, shape, consumers(g, n.output[0]))
                new_inits.append(numpy_helper.from_array(w, n.output[0]))
                dropped_shapes.add(src)
                continue
        keep_nodes.append(n)
    del g.node[:]
    g.node.extend(keep_nodes)
    still_used = {x for n in g.node for x in n.input}
    for name in dropped_shapes - still_used:
        for coll in (g.initializer, g.input):
            for item in list(coll):
                if item.name == name:
                    coll.remove(item)
    g.initializer.extend(new_inits)
    if model.ir_version < 4:  # IR version 3: every initializer is also a graph input
        g.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in new_inits)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--models", default="resnet50,vgg19,squeezenet,bvlc_alexnet")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.models.split(","):
        src = os.path.join(LIGHT_DIR, f"light_{name}.onnx")
        if not os.path.exists(src):
            sys.exit(f"make_light_models: no light model '{name}' in {LIGHT_DIR}")
        dst = os.path.join(args.out_dir, f"{name}.onnx")
        if os.path.exists(dst):
            continue
        model = materialize(onnx.load(src), args.seed)
        onnx.checker.check_model(model)
        tmp = dst + ".tmp"
        onnx.save(model, tmp)
        os.replace(tmp, dst)
        print(f"make_light_models: wrote {dst}", file=sys.stderr)


if __name__ == "__main__":
    main()
