#!/usr/bin/env python3
"""Writes the CosmoFlow reference network (MLPerf HPC, mlcommons/hpc cosmoflow/models/cosmoflow.py,
build_model) as ONNX models, channels first, with Keras-default initial weights (glorot uniform
kernels, zero biases) from a fixed seed (numpy + onnx; no PyTorch, no TensorFlow):

  cosmoflow_{32,64,128}_k{3,2}.onnx   input [N, 4, S, S, S] (log1p counts, normalised), output [N, 4]

  for i in 0 .. L-1, L = log2(S) - 2 (LBANN's rule: 32 -> 3, 64 -> 4, 128 -> 5 blocks):
      conv{i+1}   Conv3D 32*2^i filters, kernel k^3, stride 1, SAME padding (explicit pads:
                  begin (k-1)//2, end k-1-(k-1)//2 per axis, i.e. SAME_UPPER), with bias
      lrelu{i+1}  LeakyRelu alpha 0.3 (Keras LeakyReLU's default)
      pool{i+1}   MaxPool 2^3, stride 2 (S / 2^L = 4 at the end)
  flatten     Flatten axis 1: 32*2^(L-1) * 4^3 features, in C, D, H, W order (Keras flattens
              D, H, W, C: the same network up to a permutation of fc1's input rows)
  fc1         Dense 128 (Gemm, weight [128, in], transB=1) -> lrelu_fc1 -> dropout1 (ratio 0.5)
  fc2         Dense 64                                     -> lrelu_fc2 -> dropout2 (ratio 0.5)
  fc3         Dense 4 -> tanh -> scale (Mul by the constant 1.2: the reference's scale_1p2)

Parameters (closed form; tests/cli/test_cosmoflow_models.py checks it):
  sum_i [k^3 * c_i * c_{i+1} + c_{i+1}]  with c_0 = 4, c_{i+1} = 32*2^i
  + (c_L * 64 + 1) * 128 + (128 + 1) * 64 + (64 + 1) * 4
  S=128, k=3: 8,907,556 (8.91 M);  S=32, k=3: 1,337,380 (1.34 M).

Initializers are named <node>.weight / <node>.bias (conv1.weight, fc1.bias, ...), the names of
bench/cosmoflow_torch.py's module's state_dict, so weights move between the two by name.
The Dropout ratios and the 1.2 scale are initializers too (dropout.ratio, scale.value) but are not
trained parameters: the printed count leaves them out.

Usage: make_models.py OUTDIR [--seed N] [--sizes 32 64 128] [--kernels 3 2] [--dropout R]
"""
import argparse
import math
import os
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from onnx_builder import GraphBuilder  # noqa: E402

NOT_TRAINED = ("dropout.ratio", "scale.value")


def n_blocks(size):
    """LBANN's rule L = log2(S) - 2, so that the last pool leaves 4^3 voxels."""
    L = int(round(math.log2(size))) - 2
    if 2 ** (L + 2) != size or L < 1:
        raise ValueError(f"size {size}: must be a power of two >= 8")
    return L


def param_count(size, k):
    """The closed form of the docstring."""
    c = [4] + [32 * 2 ** i for i in range(n_blocks(size))]
    conv = sum(k ** 3 * c[i] * c[i + 1] + c[i + 1] for i in range(len(c) - 1))
    return conv + (c[-1] * 64 + 1) * 128 + (128 + 1) * 64 + (64 + 1) * 4


class CosmoBuilder(GraphBuilder):
    """Layers named by the reference's position (conv1, lrelu1, pool1, ..., fc3, tanh, scale);
    glorot-uniform kernels (Keras's default: limit sqrt(6 / (fan_in + fan_out)), fans including the
    receptive field k^3), zero biases."""

    def __init__(self, seed):
        super().__init__(seed=seed)

    def init(self, name, arr):
        return super().init(name, np.asarray(arr).astype(np.float32))

    def glorot(self, shape, fan_in, fan_out):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        return self.rng.uniform(-limit, limit, shape)

    def conv3d(self, name, x, cin, cout, k):
        w = self.glorot((cout, cin, k, k, k), cin * k ** 3, cout * k ** 3)
        begin = (k - 1) // 2
        end = k - 1 - begin
        return self.add_node("Conv", [x, self.init(name + ".weight", w), self.init(name + ".bias", np.zeros(cout))],
                             [name], name=name, kernel_shape=[k] * 3, strides=[1] * 3, pads=[begin] * 3 + [end] * 3)

    def dense(self, name, x, cin, cout):
        w = self.glorot((cout, cin), cin, cout)
        return self.add_node("Gemm", [x, self.init(name + ".weight", w), self.init(name + ".bias", np.zeros(cout))],
                             [name], name=name, transB=1)

    def op(self, op, name, ins, **attrs):
        return self.add_node(op, ins, [name], name=name, **attrs)


def cosmoflow(size, k, seed, dropout=0.5):
    """The reference network for S^3 inputs and kernel k (3: MLPerf HPC v1.0; 2: v0.7); `dropout`:
    the ratio of both Dropout nodes (the reference's 0.5)."""
    b = CosmoBuilder(seed)
    L = n_blocks(size)
    x, cin = "input", 4
    for i in range(L):
        cout = 32 * 2 ** i
        x = b.conv3d(f"conv{i + 1}", x, cin, cout, k)
        x = b.op("LeakyRelu", f"lrelu{i + 1}", [x], alpha=0.3)
        x = b.op("MaxPool", f"pool{i + 1}", [x], kernel_shape=[2] * 3, strides=[2] * 3)
        cin = cout
    x = b.op("Flatten", "flatten", [x], axis=1)
    ratio = b.init("dropout.ratio", np.array(dropout))
    x = b.dense("fc1", x, cin * 4 ** 3, 128)
    x = b.op("LeakyRelu", "lrelu_fc1", [x], alpha=0.3)
    x = b.op("Dropout", "dropout1", [x, ratio])
    x = b.dense("fc2", x, 128, 64)
    x = b.op("LeakyRelu", "lrelu_fc2", [x], alpha=0.3)
    x = b.op("Dropout", "dropout2", [x, ratio])
    x = b.dense("fc3", x, 64, 4)
    x = b.op("Tanh", "tanh", [x])
    x = b.op("Mul", "output", [x, b.init("scale.value", np.array(1.2))])
    return b.build([("input", ["N", 4, size, size, size])], [("output", ["N", 4])], opset=13, ir_version=8,
                   graph_name=f"cosmoflow_{size}_k{k}", producer="hpcnn configs/cosmoflow/make_models.py",
                   full_check=True)


def trained_params(model):
    return sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.name not in NOT_TRAINED)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", help="folder to write the models into (created when missing)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the initial weights (default 0)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128], help="input sizes S (default 32 64 128)")
    ap.add_argument("--kernels", type=int, nargs="+", default=[3, 2], help="conv kernel sizes (default 3 2)")
    ap.add_argument("--dropout", type=float, default=0.5,
                    help="ratio of both Dropout nodes (default 0.5, the reference's); another ratio adds "
                         "_dropout<ratio> to the file name. Same initial weights for every ratio")
    a = ap.parse_args()
    if not 0 <= a.dropout < 1:
        ap.error(f"--dropout must be in [0, 1), got {a.dropout}")
    os.makedirs(a.outdir, exist_ok=True)
    for size in a.sizes:
        for k in a.kernels:
            m = cosmoflow(size, k, a.seed, a.dropout)
            n = trained_params(m)
            assert n == param_count(size, k), (n, param_count(size, k))
            tail = "" if a.dropout == 0.5 else f"_dropout{a.dropout:g}"
            path = os.path.join(a.outdir, f"cosmoflow_{size}_k{k}{tail}.onnx")
            tmp = path + ".tmp"
            onnx.save(m, tmp)
            os.replace(tmp, path)
            print(f"{path}: {n} parameters")


if __name__ == "__main__":
    main()
