#!/usr/bin/env python3
"""Writes the ONNX models that dist-train's example configs train, with He-initialised
weights from a fixed seed (numpy + onnx.helper; no PyTorch needed):

  fashion_mnist_cnn.onnx     Conv5x5(32)-BN-ReLU-MaxPool, Conv3x3(64)-BN-ReLU, Conv3x3(64)-BN-ReLU-MaxPool,
                             Flatten, Dropout(0.25), Gemm(128)-ReLU, Gemm(10)     (~0.47 M parameters)
  fashion_mnist_resnet.onnx  ResNet-20 for 1x28x28 (He et al. 2016, section 4.2): 3x3 stem (16),
                             3 stages of 3 BasicBlocks (16, 32, 64 channels; stride 2 with 1x1
                             projection shortcuts), GlobalAveragePool, Gemm(10)   (~0.27 M parameters)
  fashion_mnist_vgg.onnx     VGG-style: 2x Conv3x3(32), MaxPool, 2x Conv3x3(64), MaxPool, 2x Conv3x3(128)
                             (each with BN-ReLU), Flatten (128x7x7), Gemm(512)-ReLU, Dropout(0.5), Gemm(10):
                             the first FC layer holds 92% of the ~3.5 M parameters, as VGG-16's fc6
                             does (sparsify-fcl's study model)

Usage: make_train_models.py OUTDIR [--seed N]
"""
import argparse
import os
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_builder import GraphBuilder  # noqa: E402


class Builder(GraphBuilder):
    """He-initialised layers named <op>_<n> (scripts/onnx_builder.py holds the graph)."""

    def __init__(self, seed):
        super().__init__(seed=seed)

    def init(self, name, arr):
        return super().init(name, np.asarray(arr).astype(np.float32))

    def conv(self, x, cin, cout, k, stride=1, pad=None, bias=False):
        pad = k // 2 if pad is None else pad
        n = self.name("conv", "_")
        w = self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
        ins = [x, self.init(n + ".weight", w)]
        if bias:
            ins.append(self.init(n + ".bias", np.zeros(cout)))
        return self.add_node("Conv", ins, [n + ".out"], name=n, kernel_shape=[k, k], strides=[stride, stride],
                             pads=[pad] * 4)

    def bn(self, x, c):
        n = self.name("bn", "_")
        ins = [x, self.init(n + ".weight", np.ones(c)), self.init(n + ".bias", np.zeros(c)),
               self.init(n + ".running_mean", np.zeros(c)), self.init(n + ".running_var", np.ones(c))]
        return self.add_node("BatchNormalization", ins, [n + ".out"], name=n, epsilon=1e-5, momentum=0.9)

    def op(self, op, ins, **attrs):
        n = self.name(op.lower(), "_")
        return self.add_node(op, ins, [n + ".out"], name=n, **attrs)

    def fc(self, x, cin, cout):
        n = self.name("fc", "_")
        bound = 1.0 / np.sqrt(cin)
        w = self.rng.uniform(-bound, bound, (cout, cin)) * np.sqrt(6.0) / np.sqrt(2.0)  # Kaiming uniform (ReLU)
        b = self.rng.uniform(-bound, bound, cout)
        return self.add_node("Gemm", [x, self.init(n + ".weight", w), self.init(n + ".bias", b)], [n + ".out"], name=n,
                             transB=1)

    def model(self, out, name):
        return self.build([("input", ["N", 1, 28, 28])], [(out, ["N", 10])], opset=13, ir_version=8, graph_name=name,
                          producer="hpcnn make_train_models.py", full_check=True)


def cnn(seed):
    b = Builder(seed)
    x = b.op("Relu", [b.bn(b.conv("input", 1, 32, 5), 32)])
    x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.op("Relu", [b.bn(b.conv(x, 32, 64, 3), 64)])
    x = b.op("Relu", [b.bn(b.conv(x, 64, 64, 3), 64)])
    x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.op("Flatten", [x], axis=1)
    ratio = b.init("dropout.ratio", np.array(0.25))
    x = b.op("Dropout", [x, ratio])
    x = b.op("Relu", [b.fc(x, 64 * 7 * 7, 128)])
    return b.model(b.fc(x, 128, 10), "fashion_mnist_cnn")


def resnet20(seed):
    b = Builder(seed)
    x = b.op("Relu", [b.bn(b.conv("input", 1, 16, 3), 16)])
    cin = 16
    for stage, c in enumerate([16, 32, 64]):
        for block in range(3):
            stride = 2 if (stage > 0 and block == 0) else 1
            y = b.op("Relu", [b.bn(b.conv(x, cin, c, 3, stride), c)])
            y = b.bn(b.conv(y, c, c, 3), c)
            sc = x if (stride == 1 and cin == c) else b.bn(b.conv(x, cin, c, 1, stride, pad=0), c)
            x = b.op("Relu", [b.op("Add", [y, sc])])
            cin = c
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    return b.model(b.fc(x, 64, 10), "fashion_mnist_resnet20")


def vgg(seed):
    b = Builder(seed)
    x, cin = "input", 1
    for c in (32, 64, 128):
        for _ in range(2):
            x = b.op("Relu", [b.bn(b.conv(x, cin, c, 3), c)])
            cin = c
        if c != 128:
            x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.op("Flatten", [x], axis=1)
    x = b.op("Relu", [b.fc(x, 128 * 7 * 7, 512)])
    x = b.op("Dropout", [x, b.init("dropout.ratio", np.array(0.5))])
    return b.model(b.fc(x, 512, 10), "fashion_mnist_vgg")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    for name, fn in [("fashion_mnist_cnn", cnn), ("fashion_mnist_resnet", resnet20), ("fashion_mnist_vgg", vgg)]:
        m = fn(a.seed)
        path = os.path.join(a.outdir, name + ".onnx")
        onnx.save(m, path)
        params = sum(int(np.prod(t.dims)) for t in m.graph.initializer if "running" not in t.name and t.dims)
        print(f"{path}: {params} parameters")


if __name__ == "__main__":
    main()
