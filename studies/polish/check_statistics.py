"""Checks a bn-polish output against onnxruntime on the real model: runs the model over the first K
training images (normalised only, as bn-polish reads them) with every BatchNormalization input as an
extra output and compares each channel's mean and population variance with the written
input_mean / input_var. Prints the relative errors per layer; exit 1 when one exceeds 1e-3.

    .venv/bin/python studies/polish/check_statistics.py POLISHED.onnx --mean 0.286 --std 0.353 --samples 10000 \\
        [--images /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz]
"""
import argparse
import gzip
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("model")
ap.add_argument("--mean", type=float, required=True)
ap.add_argument("--std", type=float, required=True)
ap.add_argument("--samples", type=int, required=True)
ap.add_argument("--images", default="/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
a = ap.parse_args()
if a.samples < 1:
    sys.exit(f"check_statistics: --samples must be >= 1, not {a.samples}")
try:
    m = onnx.load(a.model)
    raw = gzip.open(a.images).read()
except Exception as e:  # noqa: BLE001 (a missing, truncated or corrupt file)
    sys.exit(f"check_statistics: cannot read {a.model} or {a.images}: {e}")
if not m.graph.node:
    sys.exit(f"check_statistics: {a.model} holds no graph (empty or not an ONNX model)")
inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
bns = [n for n in m.graph.node if n.op_type == "BatchNormalization"]
for n in bns:
    m.graph.output.append(helper.make_tensor_value_info(n.input[0], onnx.TensorProto.FLOAT, None))
sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
x = np.frombuffer(raw, np.uint8, offset=16).reshape(-1, 1, 28, 28)[: a.samples].astype(np.float32) / 255
if len(x) < a.samples:
    sys.exit(f"check_statistics: {a.images} holds {len(x)} images, fewer than --samples {a.samples}")
x = (x - a.mean) / a.std
names = [n.input[0] for n in bns]
s1, s2, cnt = [0.0] * len(bns), [0.0] * len(bns), [0] * len(bns)
inp = sess.get_inputs()[0].name
for b in range(0, len(x), 500):
    for i, o in enumerate(sess.run(names, {inp: x[b:b + 500]})):
        o = o.astype(np.float64)
        s1[i] = s1[i] + o.sum(axis=(0, 2, 3))
        s2[i] = s2[i] + (o * o).sum(axis=(0, 2, 3))
        cnt[i] += o.shape[0] * o.shape[2] * o.shape[3]
worst = 0.0
for i, n in enumerate(bns):
    mu = s1[i] / cnt[i]
    var = s2[i] / cnt[i] - mu * mu
    em = np.max(np.abs(inits[n.input[3]] - mu) / (np.abs(mu) + 1e-3))
    ev = np.max(np.abs(inits[n.input[4]] - var) / (var + 1e-6))
    worst = max(worst, em, ev)
    print(f"{n.name}: relative error of the mean {em:.2e}, of the variance {ev:.2e}")
print(f"{len(bns)} BatchNormalization nodes, largest relative error {worst:.2e}")
sys.exit(1 if worst > 1e-3 else 0)
