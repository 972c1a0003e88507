"""huffgpu-encode / -decode with --device cuda, as a user runs them (needs a CUDA device).

Needs only the Python standard library and pytest (the codec-only build on the GPU machine)."""
import gzip
import os
import subprocess
import sys

import pytest

BIN_DIR = os.environ.get("HPCNN_BIN_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build", "tools"))
ENC, DEC = (os.path.join(BIN_DIR, t, t) for t in ("huffgpu-encode", "huffgpu-decode"))
DATA = os.path.join(os.path.dirname(__file__), "..", "data")
FASHION = os.environ.get("HPCNN_FASHION_MNIST", "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")

probe = subprocess.run([ENC, "-c", "--device", "cuda"], input=b"x", capture_output=True)
if probe.returncode != 0:
    print("SKIPPED: no CUDA device:", probe.stderr.decode().strip())
    pytest.skip("SKIPPED: no CUDA device", allow_module_level=True)


def run(args, data=None):
    p = subprocess.run(list(map(str, args)), input=data, capture_output=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("name", ["alice29.txt", "html", "geo.protodata", "kppkn.gtb", "fireworks.jpeg"])
@pytest.mark.parametrize("flags", [[], ["--no-gap-array"], ["--segment-bits", "128", "--max-code-length", "16"]])
def test_same_bytes_as_cpu(name, flags):
    data = open(os.path.join(DATA, name), "rb").read()
    cpu = run([ENC, "-c", "--device", "cpu", *flags], data)
    gpu = run([ENC, "-c", "--device", "cuda", *flags], data)
    assert gpu == cpu
    assert run([DEC, "-c", "--device", "cuda"], cpu) == data


def test_fashion_mnist_and_memory_cap():
    if not os.path.exists(FASHION):
        pytest.skip(f"no Fashion-MNIST training images at {FASHION} (dataset-fashion-mnist; or set HPCNN_FASHION_MNIST)")
    data = gzip.open(FASHION).read()
    enc = run([ENC, "-c", "--device", "cuda", "--chunk-size", "8M", "--gpu-memory-cap", "64M"], data)
    assert enc == run([ENC, "-c", "--device", "cpu", "--chunk-size", "8M"], data)
    assert run([DEC, "-c", "--device", "cuda", "--gpu-memory-cap", "64M"], enc) == data


def test_over_4gib_through_pipes():
    gen = (f"{sys.executable} -c \"import sys\n"
           "block=b''.join(b'%d the quick brown fox %x\\n'%(i,i*7919) for i in range(40000))\n"
           "n=0\nwhile n<4_300_000_000: sys.stdout.buffer.write(block); n+=len(block)\"")
    want = subprocess.run(f"{gen} | md5sum", shell=True, capture_output=True, text=True, check=True).stdout.split()[0]
    got = subprocess.run(f"set -o pipefail; {gen} | {ENC} -c --device cuda | {DEC} -c --device cuda | md5sum", shell=True,
                         capture_output=True, text=True, executable="/bin/bash")
    assert got.returncode == 0, got.stderr
    assert got.stdout.split()[0] == want
