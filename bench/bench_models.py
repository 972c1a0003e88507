#!/usr/bin/python3
"""The two CNNs of the training-throughput benchmark, defined once in PyTorch, and their ONNX export.

  fmnist_cnn  small Fashion-MNIST CNN (0.47 M parameters):
              [conv3x3 32 - BN - ReLU] x2 - maxpool 2 - [conv3x3 64 - BN - ReLU] x2 - maxpool 2 -
              flatten (64x7x7) - FC 128 - ReLU - FC 10
  resnet18    ResNet-18-like for 1x28x28 inputs (11.2 M parameters): 3x3 stem conv 64 - BN - ReLU,
              no max-pool, BasicBlocks [2, 2, 2, 2] with 64, 128, 256, 512 channels (stride 2 at
              stages 2-4, 1x1 projection shortcuts with BN), global average pool, FC 10

Convolutions followed by BatchNorm have no bias. The ONNX export uses training mode
(torch.onnx.TrainingMode.TRAINING) without constant folding, so BatchNormalization nodes stay in
the graph (opset 13); the batch dimension is fixed to the export batch.

Run with Debian's interpreter (python3-torch):
  /usr/bin/python3 bench/bench_models.py OUT_DIR [--models fmnist_cnn,resnet18] [--batch 64]
writes OUT_DIR/<model>.onnx. bench_train_torch.py imports build_model() from here.
"""
import argparse
import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_CLASSES = 10
INPUT_SHAPE = (1, 28, 28)


def conv_bn_relu(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


class FmnistCnn(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.features = nn.Sequential(
            *conv_bn_relu(1, 32), *conv_bn_relu(32, 32), nn.MaxPool2d(2),
            *conv_bn_relu(32, 64), *conv_bn_relu(64, 64), nn.MaxPool2d(2))
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = torch.flatten(self.features(x), 1)
        return self.fc2(F.relu(self.fc1(x)))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.shortcut is None else self.shortcut(x)))


class ResNet18(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES, in_channels=1):
        super().__init__()
        self.stem = nn.Sequential(*conv_bn_relu(in_channels, 64))
        blocks, cin = [], 64
        for i, cout in enumerate((64, 128, 256, 512)):
            for j in range(2):
                blocks.append(BasicBlock(cin, cout, 2 if (i > 0 and j == 0) else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


MODELS = {"fmnist_cnn": FmnistCnn, "resnet18": ResNet18}


def build_model(name, seed=0):
    if name not in MODELS:
        raise SystemExit(f"unknown model '{name}' (known: {', '.join(MODELS)})")
    torch.manual_seed(seed)
    return MODELS[name]()


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())


def export(name, path, batch=64, seed=0):
    model = build_model(name, seed)
    model.train()
    x = torch.randn(batch, *INPUT_SHAPE)
    tmp = path + ".tmp"
    with warnings.catch_warnings():  # "Removing mutation ... num_batches_tracked": not used by ONNX
        warnings.simplefilter("ignore", UserWarning)
        torch.onnx.export(model, (x,), tmp, opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["input"], output_names=["logits"])
    os.replace(tmp, path)
    return count_parameters(model)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.models.split(","):
        path = os.path.join(args.out_dir, name + ".onnx")
        n = export(name, path, args.batch, args.seed)
        print(f"{path}: {n / 1e6:.2f} M parameters", file=sys.stderr)


if __name__ == "__main__":
    main()
