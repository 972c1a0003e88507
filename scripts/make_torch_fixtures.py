#!/usr/bin/python3
"""Makes the PyTorch reference fixtures of tests/data/nn/ for the training engine's tests
(tests/nn/test_torch_fixtures.cpp). Run once by hand, commit the output; CI never needs torch.

    /usr/bin/python3 scripts/make_torch_fixtures.py     # Debian's python3-torch (1.13)

Needs torch and numpy (Debian's interpreter); the check of the exported files then runs in
the project's .venv (onnx, onnxruntime, numpy): `--python` picks that interpreter, and the
same script runs there as `make_torch_fixtures.py --verify DIR...`.

For each of three small CNNs (fixed seed) it writes tests/data/nn/<model>/:
  model.onnx      torch.onnx.export(training=TrainingMode.TRAINING, do_constant_folding=False),
                  so BatchNormalization stays a node (momentum = 1 - torch momentum) and the
                  initializers carry the state_dict names;
  input.npy       the fixed batch ('<f4', NCHW);  labels.npy  class indices ('<i8');
  eval_logits.npy logits in eval mode (running statistics) for the exported weights;
  train_logits.npy, loss.npy ('<f8', 0-d), logits_grad.npy, input_grad.npy: one training-mode
                  forward and F.cross_entropy(logits, labels, label_smoothing=0.1), backward;
  grad_<name>.npy d(loss)/d(parameter) for every parameter (file name = sanitised ONNX
                  initializer name);
  buffer_<name>.npy BatchNorm running_mean / running_var after that training forward (torch:
                  running_var is updated with the unbiased batch variance);
                  biasedvar_<name>.npy the running_var an update with the biased (population)
                  batch variance would give, only to diagnose which convention an engine uses;
  manifest.json   files, names, shapes, label smoothing, versions.
The reference is computed in float64 from the exported fp32 weights and inputs (promoted),
then rounded to fp32, so it carries no fp32 accumulation-order error of its own;
manifest.json records per tensor how far torch's own fp32 run is from it ("fp32_err"): the
max over elements of |fp32 - ref| / (1e-5 + 1e-4 |ref|), i.e. < 1 means fp32 torch meets the
tests' tolerance.
"""
import argparse
import copy
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT_DIR = os.path.join(ROOT, "tests", "data", "nn")
LABEL_SMOOTHING = 0.1
FMNIST = "/usr/share/datasets/fashion-mnist"  # Debian package dataset-fashion-mnist
ATOL, RTOL = 1e-5, 1e-4                       # the C++ test's tolerance, for the fp32_err figures


def sanitise(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


# ---------------------------------------------------------------------------------------------
# torch part (Debian's python3)

def build_models():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class FashionCNN(nn.Module):
        """Conv-BN-ReLU-MaxPool x2, Flatten, Linear-ReLU-Dropout(0)-Linear on [N,1,28,28]."""

        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
            self.bn1 = nn.BatchNorm2d(4)
            self.conv2 = nn.Conv2d(4, 8, 3, padding=1)
            self.bn2 = nn.BatchNorm2d(8)
            self.fc1 = nn.Linear(8 * 7 * 7, 32)
            self.drop = nn.Dropout(p=0.0)
            self.fc2 = nn.Linear(32, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
            x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
            x = torch.flatten(x, 1)
            return self.fc2(self.drop(F.relu(self.fc1(x))))

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride, momentum):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout, momentum=momentum)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout, momentum=momentum)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                                nn.BatchNorm2d(cout, momentum=momentum))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            identity = x if self.downsample is None else self.downsample(x)
            return F.relu(out + identity)

    class TinyResNet(nn.Module):
        """Stem, BasicBlock (identity Add), BasicBlock (1x1 stride-2 projection), GAP, Linear."""

        def __init__(self):
            super().__init__()
            m = 0.2  # not torch's default 0.1: the engine must use the node's momentum
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(8, momentum=m)
            self.layer1 = BasicBlock(8, 8, 1, m)
            self.layer2 = BasicBlock(8, 16, 2, m)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))
            x = self.layer2(self.layer1(x))
            return self.fc(torch.flatten(self.pool(x), 1))

    class MiscOps(nn.Module):
        """LeakyReLU, ReLU6 (Clip), Sigmoid, depthwise / grouped / dilated Conv, Concat,
        AvgPool2d with and without count_include_pad, Linear without bias (Transpose+MatMul)."""

        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8, eps=1e-3, momentum=0.05)
            self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)             # depthwise
            self.grp = nn.Conv2d(8, 8, 3, padding=1, groups=2, bias=False)  # grouped
            self.dil = nn.Conv2d(8, 8, 3, padding=2, dilation=2)          # dilated
            self.pool_incl = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=True)
            self.pool_excl = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
            self.mix = nn.Conv2d(48, 8, 1)
            self.pool2 = nn.AvgPool2d(2)
            self.fc = nn.Linear(8 * 3 * 3, 10, bias=False)

        def forward(self, x):
            x = F.leaky_relu(self.bn(self.stem(x)), 0.1)
            a = F.relu6(self.dw(x) * 4.0)
            b = torch.sigmoid(self.grp(x))
            c = F.relu(self.dil(x))
            y = torch.cat([a, b, c], 1)
            y = torch.cat([self.pool_incl(y), self.pool_excl(y)], 1)
            y = self.pool2(F.relu(self.mix(y)))
            return self.fc(torch.flatten(y, 1))

    return [
        # name, module, input shape, opset, description
        ("fmnist_cnn", FashionCNN, (4, 1, 28, 28), 13,
         "Fashion-MNIST CNN: Conv-BN-ReLU-MaxPool x2, Flatten, Gemm-ReLU-Dropout(0)-Gemm"),
        ("resnet_tiny", TinyResNet, (4, 3, 16, 16), 13,
         "ResNet: stem, BasicBlock with identity Add, BasicBlock with 1x1 stride-2 projection, "
         "GlobalAveragePool, Flatten, Gemm; BatchNorm momentum 0.2 (ONNX 0.8)"),
        ("misc_ops", MiscOps, (4, 3, 12, 12), 11,
         "opset 11: LeakyReLU, Clip (ReLU6) with constant inputs, Sigmoid, Mul by a constant, "
         "depthwise, grouped and dilated Conv, Concat, AvgPool2d with count_include_pad True (exported by "
         "torch as Pad + AveragePool) and False (AveragePool pads), "
         "Transpose+MatMul (Linear without bias); BatchNorm eps 1e-3, momentum 0.05 (ONNX 0.95)"),
    ]


def fmnist_batch(n):
    """The first n test images of Fashion-MNIST, normalised, and their labels (None if absent)."""
    import numpy as np
    img, lab = os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz"), os.path.join(FMNIST, "t10k-labels-idx1-ubyte.gz")
    if not (os.path.exists(img) and os.path.exists(lab)):
        return None
    with gzip.open(img, "rb") as f:
        raw = f.read(16 + n * 784)
    with gzip.open(lab, "rb") as f:
        labels = np.frombuffer(f.read(8 + n)[8:], dtype=np.uint8).astype(np.int64)
    x = np.frombuffer(raw[16:], dtype=np.uint8).reshape(n, 1, 28, 28).astype(np.float32) / 255.0
    x = (x - np.float32(0.2860)) / np.float32(0.3530)
    return x.astype(np.float32), labels


def randomise_batchnorm(model, gen):
    import torch
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            c = m.num_features
            with torch.no_grad():
                m.weight.copy_(torch.rand(c, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(c, generator=gen) * 0.1)
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)


def err_ratio(fp32, ref):
    import numpy as np
    fp32 = np.asarray(fp32, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if fp32.size == 0:
        return 0.0
    return float(np.max(np.abs(fp32 - ref) / (ATOL + RTOL * np.abs(ref))))


def run_reference(model, x, labels, dtype):
    """One eval forward and one training forward/backward of a copy of `model` in `dtype`."""
    import torch
    import torch.nn.functional as F
    m = copy.deepcopy(model).to(dtype)
    xin = torch.from_numpy(x).to(dtype)
    lab = torch.from_numpy(labels)
    m.eval()
    with torch.no_grad():
        eval_logits = m(xin).detach().clone()
    m.train()
    # Inputs of every BatchNorm, to derive what a biased-variance running_var update gives.
    bn_inputs = {}
    hooks = []
    for name, mod in m.named_modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            hooks.append(mod.register_forward_pre_hook(
                lambda mod, inp, name=name: bn_inputs.__setitem__(name, inp[0].detach().clone())))
    old_var = {n: b.detach().clone() for n, b in m.named_buffers() if n.endswith("running_var")}
    xg = xin.clone().requires_grad_(True)
    logits = m(xg)
    logits.retain_grad()
    loss = F.cross_entropy(logits, lab, label_smoothing=LABEL_SMOOTHING)
    loss.backward()
    for h in hooks:
        h.remove()
    biased = {}
    for name, mod in m.named_modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            v = bn_inputs[name].var(dim=(0, 2, 3), unbiased=False)
            key = (name + "." if name else "") + "running_var"
            biased[key] = (1 - mod.momentum) * old_var[key] + mod.momentum * v
    return {
        "eval_logits": eval_logits.numpy(),
        "train_logits": logits.detach().numpy(),
        "loss": loss.detach().numpy(),
        "logits_grad": logits.grad.detach().numpy(),
        "input_grad": xg.grad.detach().numpy(),
        "grads": {n: p.grad.detach().numpy() for n, p in m.named_parameters()},
        "buffers": {n: b.detach().numpy() for n, b in m.named_buffers() if not n.endswith("num_batches_tracked")},
        "biased_var": {n: v.detach().numpy() for n, v in biased.items()},
        "momentum": {n: mod.momentum for n, mod in m.named_modules() if isinstance(mod, torch.nn.BatchNorm2d)},
    }


def make_fixture(name, cls, shape, opset, description, seed, out_root, stash):
    import numpy as np
    import torch
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    model = cls()
    randomise_batchnorm(model, gen)

    x = labels = None
    source = "torch.randn (seeded)"
    if name == "fmnist_cnn":
        got = fmnist_batch(shape[0])
        if got is not None:
            x, labels = got
            source = "first %d images of Fashion-MNIST t10k (dataset-fashion-mnist), (x/255-0.2860)/0.3530" % shape[0]
    if x is None:
        x = torch.randn(*shape, generator=gen).numpy().astype(np.float32)
        labels = torch.randint(0, 10, (shape[0],), generator=gen).numpy().astype(np.int64)

    out = os.path.join(out_root, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)

    # Export a copy: the training-mode trace runs the model once, which updates BatchNorm's
    # running statistics of the module it traces, and the exported initializers are the values
    # after that update. The reference then starts from exactly what the file holds.
    exported = copy.deepcopy(model)
    onnx_path = os.path.join(out, "model.onnx")
    torch.onnx.export(exported, torch.from_numpy(x), onnx_path,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      opset_version=opset, input_names=["input"], output_names=["logits"])
    model = exported
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    np.savez(os.path.join(stash, name + ".npz"), **state)

    ref = run_reference(model, x, labels, torch.float64)
    f32 = run_reference(model, x, labels, torch.float32)

    manifest = {
        "name": name,
        "description": description,
        "generator": "scripts/make_torch_fixtures.py",
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "seed": seed,
        "opset": opset,
        "model": "model.onnx",
        "reference": "float64 computation from the exported fp32 weights and inputs, rounded to fp32 "
                     "(loss kept as float64); fp32_err = max |torch fp32 - ref| / (1e-5 + 1e-4 |ref|)",
        "label_smoothing": LABEL_SMOOTHING,
        "loss_function": "torch.nn.functional.cross_entropy(logits, labels, label_smoothing=%g), mean over the batch"
                         % LABEL_SMOOTHING,
        "input_source": source,
        "input_name": "input",
        "output_name": "logits",
    }

    def save(fname, arr, dtype=np.float32):
        arr = np.array(arr, dtype=dtype, order="C")  # keeps 0-d arrays 0-d
        np.save(os.path.join(out, fname), arr, allow_pickle=False)
        return {"file": fname, "shape": list(arr.shape), "dtype": arr.dtype.str}

    manifest["input"] = save("input.npy", x)
    manifest["labels"] = save("labels.npy", labels, np.int64)
    for key in ("eval_logits", "train_logits", "logits_grad", "input_grad"):
        manifest[key] = save(key + ".npy", ref[key])
        manifest[key]["fp32_err"] = err_ratio(f32[key], ref[key])
    manifest["loss"] = save("loss.npy", ref["loss"], np.float64)
    manifest["loss"]["value"] = float(ref["loss"])
    manifest["loss"]["fp32_err"] = err_ratio(f32["loss"], ref["loss"])

    used = set()

    def fname_for(prefix, n):
        f = prefix + sanitise(n) + ".npy"
        assert f not in used, f
        used.add(f)
        return f

    manifest["parameters"] = []
    for n, g in ref["grads"].items():
        e = save(fname_for("grad_", n), g)
        e = {"name": n, **e, "fp32_err": err_ratio(f32["grads"][n], g)}
        manifest["parameters"].append(e)
    manifest["buffers"] = []
    for n, b in ref["buffers"].items():
        e = {"name": n, **save(fname_for("buffer_", n), b), "fp32_err": err_ratio(f32["buffers"][n], b)}
        mod = n.rsplit(".", 1)[0]
        e["torch_momentum"] = ref["momentum"][mod]
        e["onnx_momentum"] = 1.0 - ref["momentum"][mod]
        if n in ref["biased_var"]:
            e["if_biased_variance"] = save(fname_for("biasedvar_", n), ref["biased_var"][n])["file"]
        manifest["buffers"].append(e)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    return manifest


def generate(args):
    import numpy as np
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    stash = tempfile.mkdtemp(prefix="hpcnn_torch_fixtures_")
    try:
        names = []
        for i, (name, cls, shape, opset, desc) in enumerate(build_models()):
            m = make_fixture(name, cls, shape, opset, desc, 20240 + i, args.out, stash)
            worst = max([p["fp32_err"] for p in m["parameters"]] + [m["train_logits"]["fp32_err"]])
            print("%-12s opset %d  loss %.6f  %d parameters  %d buffers  worst torch-fp32 err ratio %.3g"
                  % (name, opset, m["loss"]["value"], len(m["parameters"]), len(m["buffers"]), worst), file=sys.stderr)
            names.append(name)
        if args.python and os.path.exists(args.python):
            dirs = [os.path.join(args.out, n) for n in names]
            subprocess.run([args.python, os.path.abspath(__file__), "--verify", "--stash", stash] + dirs, check=True)
        else:
            print("warning: no %s: exported models not verified with onnx/onnxruntime" % args.python, file=sys.stderr)
    finally:
        shutil.rmtree(stash, ignore_errors=True)
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(args.out) for f in fs)
    print("wrote %s: %d bytes in all (torch %s, numpy %s)" % (args.out, total, torch.__version__, np.__version__),
          file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# verification part (.venv: onnx, onnxruntime, numpy)

def verify(dirs, stash):
    import numpy as np
    import onnx
    from onnx import numpy_helper
    for d in dirs:
        with open(os.path.join(d, "manifest.json")) as f:
            man = json.load(f)
        model = onnx.load(os.path.join(d, man["model"]))
        onnx.checker.check_model(model)
        opset = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")][0]
        assert opset == man["opset"], (d, opset)
        inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        params = [p["name"] for p in man["parameters"]]
        buffers = [b["name"] for b in man["buffers"]]
        assert set(inits) == set(params) | set(buffers), (d, sorted(inits), params, buffers)
        ops = [n.op_type for n in model.graph.node]
        n_bn = sum(1 for b in buffers if b.endswith("running_mean"))
        assert ops.count("BatchNormalization") == n_bn, (d, ops)
        for n in model.graph.node:
            if n.op_type == "BatchNormalization":
                mom = [a.f for a in n.attribute if a.name == "momentum"][0]
                bufs = [b for b in man["buffers"] if b["name"] == n.input[3]]
                assert abs(mom - bufs[0]["onnx_momentum"]) < 1e-6, (n.name, mom)
        if stash:
            state = np.load(os.path.join(stash, man["name"] + ".npz"))
            for k, v in inits.items():
                assert np.array_equal(v, state[k]), (d, k, "exported initializer differs from the reference's")
        # Graph inputs / outputs.
        assert [i.name for i in model.graph.input if i.name not in inits] == [man["input_name"]]
        assert [o.name for o in model.graph.output] == [man["output_name"]]
        # Logits cross-checked with onnxruntime: as exported, its BatchNormalization kernel runs in
        # training mode (the node has the optional running-statistics outputs), so it must give
        # train_logits; with those outputs removed it runs in inference mode and must give eval_logits.
        note = "onnxruntime: not installed"
        try:
            import onnxruntime as ort
        except ImportError:
            ort = None
        if ort is not None:
            x = np.load(os.path.join(d, man["input"]["file"]))
            infer = copy.deepcopy(model)
            for n in infer.graph.node:
                if n.op_type == "BatchNormalization":
                    del n.output[1:]
            errs = []
            for m, key in ((model, "train_logits"), (infer, "eval_logits")):
                sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
                got = sess.run([man["output_name"]], {man["input_name"]: x})[0]
                want = np.load(os.path.join(d, man[key]["file"]))
                err = float(np.max(np.abs(got - want) / (ATOL + RTOL * np.abs(want))))
                assert err < 1, (d, key, "onnxruntime disagrees with the reference", err)
                errs.append("%s %.3g" % (key, err))
            note = "onnxruntime err ratios: " + ", ".join(errs)
        print("verified %s: opset %d, %d initializers = state_dict names, ops %s; %s"
              % (os.path.basename(d), opset, len(inits), sorted(set(ops)), note), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=OUT_DIR, help="output folder (default tests/data/nn)")
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"),
                    help="interpreter with onnx and onnxruntime for the check of the exported files")
    ap.add_argument("--verify", action="store_true", help="only check the fixture folders given (needs onnx)")
    ap.add_argument("--stash", help=argparse.SUPPRESS)
    ap.add_argument("dirs", nargs="*")
    args = ap.parse_args()
    if args.verify:
        verify(args.dirs, args.stash)
    else:
        generate(args)


if __name__ == "__main__":
    main()
