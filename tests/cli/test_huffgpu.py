"""huffgpu-encode / huffgpu-decode as a user runs them: files, pipes, flags, bad input."""
import gzip
import hashlib
import json
import os
import pty
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

from hpcnn_test import tool

DATA = os.path.join(os.path.dirname(__file__), "..", "data")
FILES = ["alice29.txt", "html", "geo.protodata", "kppkn.gtb", "fireworks.jpeg"]
FASHION = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
ENC, DEC = tool("huffgpu-encode"), tool("huffgpu-decode")


def run(args, data=None, check=True):
    p = subprocess.run(list(map(str, args)), input=data, capture_output=True)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} exited {p.returncode}: {p.stderr.decode()}")
    return p


def encode(data, *flags):
    return run([ENC, "-c", *flags], data).stdout


def decode(data, *flags):
    return run([DEC, "-c", *flags], data).stdout


@pytest.mark.parametrize("name", FILES)
def test_real_files_round_trip(name, tmp_path):
    src = tmp_path / name
    src.write_bytes(open(os.path.join(DATA, name), "rb").read())
    run([ENC, src])
    assert (tmp_path / (name + ".huf")).exists() and src.exists()  # original kept
    os.rename(src, tmp_path / "orig")
    run([DEC, tmp_path / (name + ".huf")])
    assert src.read_bytes() == (tmp_path / "orig").read_bytes()


def test_fashion_mnist_images_round_trip():
    images = gzip.open(FASHION).read()
    assert len(images) == 47040016
    enc = encode(images)
    assert len(enc) < len(images)
    assert decode(enc) == images
    assert decode(encode(images, "--no-gap-array", "--chunk-size", "1M")) == images


def test_same_bytes_for_every_thread_count():
    data = gzip.open(FASHION).read()[:20_000_000]
    outs = {hashlib.sha256(encode(data, "-T", t)).hexdigest() for t in (1, 2, 3, 4, 0)}
    assert len(outs) == 1
    enc = encode(data, "-T", 1)
    for t in (1, 2, 5):
        assert decode(enc, "-T", t) == data


@pytest.mark.parametrize("flags", [[], ["--segment-bits", "128"], ["--no-gap-array"], ["--max-code-length", "16"],
                                   ["--max-code-length", "8"], ["--chunk-size", "1000"]])
def test_pipes_and_settings(flags):
    data = open(os.path.join(DATA, "alice29.txt"), "rb").read() * 3
    p = subprocess.run(f"cat {os.path.join(DATA, 'alice29.txt')} | {ENC} -c {' '.join(flags)} | {DEC} -c | cmp - {os.path.join(DATA, 'alice29.txt')}",
                       shell=True)
    assert p.returncode == 0
    assert decode(encode(data, *flags)) == data


@pytest.mark.parametrize("data", [b"", b"x", b"ab", b"\0" * 100000, bytes(range(256)) * 3, b"abc" * 3 + b"d",
                                  np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()],
                         ids=["empty", "one", "two", "zeros", "all256", "odd", "random"])
def test_edge_cases(data):
    enc = encode(data)
    assert decode(enc) == data
    assert run([DEC, "-t"], enc).stdout == b""


def test_fibonacci_counts_limit_the_code():
    data = b"".join(bytes([s]) * n for s, n in enumerate([1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597,
                                                            2584, 4181, 6765, 10946, 17711, 28657, 46368]))
    for limit in ("8", "12", "16"):
        assert decode(encode(data, "--max-code-length", limit)) == data


def test_over_4gib_through_pipes():
    """4.3 GB of generated text through encode | decode, compared by checksum (no file kept)."""
    gen = (f"{sys.executable} -c \"import sys,itertools\n"
           "block=b''.join(b'%d the quick brown fox %x\\n'%(i,i*7919) for i in range(40000))\n"
           "n=0\nwhile n<4_300_000_000: sys.stdout.buffer.write(block); n+=len(block)\"")
    want = subprocess.run(f"{gen} | md5sum", shell=True, capture_output=True, text=True, check=True).stdout.split()[0]
    got = subprocess.run(f"set -o pipefail; {gen} | {ENC} -c | {DEC} -c | md5sum", shell=True, capture_output=True, text=True,
                         executable="/bin/bash")
    assert got.returncode == 0, got.stderr
    assert got.stdout.split()[0] == want


def test_output_naming_force_keep_rm_json(tmp_path):
    src = tmp_path / "a.txt"
    data = open(os.path.join(DATA, "html"), "rb").read()
    src.write_bytes(data)
    stats = json.loads(run([ENC, src, "--json"]).stdout)
    assert stats["original_bytes"] == len(data) and stats["encoded_bytes"] == (tmp_path / "a.txt.huf").stat().st_size
    p = run([ENC, src], check=False)  # exists: refused without -f
    assert p.returncode == 3 and b"-f" in p.stderr
    run([ENC, "-f", "--rm", src])
    assert not src.exists()
    run([DEC, tmp_path / "a.txt.huf", "-o", tmp_path / "b.txt"])
    assert (tmp_path / "b.txt").read_bytes() == data
    run([DEC, "--rm", tmp_path / "a.txt.huf"])
    assert src.read_bytes() == data and not (tmp_path / "a.txt.huf").exists()
    # -c with --json: statistics go to stderr, data to stdout
    p = run([ENC, "-c", "--json", src])
    assert json.loads(p.stderr.splitlines()[-1])["original_bytes"] == len(data) and decode(p.stdout) == data


def test_several_files_and_a_failure(tmp_path):
    for n in ("x", "y"):
        (tmp_path / n).write_bytes(n.encode() * 1000)
    p = run([ENC, tmp_path / "x", tmp_path / "missing", tmp_path / "y"], check=False)
    assert p.returncode == 3 and b"missing" in p.stderr
    assert (tmp_path / "x.huf").exists() and (tmp_path / "y.huf").exists()


def test_refuses_binary_output_to_a_terminal(tmp_path):
    src = tmp_path / "f"
    src.write_bytes(b"hello" * 100)
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(ENC, [ENC, "-c", str(src)])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 1024)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 1 and b"terminal" in out


def test_device_option():
    assert decode(encode(b"abc" * 100, "--device", "auto")) == b"abc" * 100
    p = run([ENC, "-c", "--device", "cuda"], b"abc", check=False)
    assert p.returncode == 5 and b"CUDA" in p.stderr


def test_help_and_version():
    for t in (ENC, DEC):
        assert b"--threads" in run([t, "--help"]).stdout
        assert b"hpcnn" in run([t, "--version"]).stdout


# ---- bad input ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stream():
    data = open(os.path.join(DATA, "alice29.txt"), "rb").read()
    return data, encode(data, "--chunk-size", "64K")


def fails(tmp_path, blob, *words):
    f = tmp_path / "bad.huf"
    f.write_bytes(blob)
    p = run([DEC, f], check=False)
    assert p.returncode == 2, (p.returncode, p.stderr)
    msg = p.stderr.decode()
    assert "huffgpu-decode: error: " + str(f) in msg
    for w in words:
        assert w in msg, (w, msg)
    assert sorted(os.listdir(tmp_path)) == ["bad.huf"]  # no output, no temporary file
    f.unlink()
    return msg


def test_empty_and_wrong_magic(tmp_path):
    fails(tmp_path, b"", "empty")
    fails(tmp_path, b"GZIP" + b"\0" * 100, "magic")


def test_truncated_streams(tmp_path, stream):
    _, enc = stream
    for cut in sorted({1, 15, 16, 40, 100, len(enc) // 2, len(enc) - 41, len(enc) - 40, len(enc) - 1}):
        fails(tmp_path, enc[:cut])


def test_flipped_bits_decode_or_fail(tmp_path, stream):
    data, enc = stream
    rng = np.random.default_rng(5)
    for pos in rng.integers(0, len(enc), 60):
        bad = bytearray(enc)
        bad[pos] ^= 1 << int(rng.integers(0, 8))
        p = run([DEC, "-c"], bytes(bad), check=False)
        if p.returncode == 0:
            assert p.stdout == data  # e.g. a padding bit
        else:
            assert p.returncode == 2 and b"byte offset" in p.stderr, p.stderr


def test_inconsistent_chunk_table(tmp_path, stream):
    _, enc = stream
    bad = bytearray(enc)
    table = len(enc) - 40 - 16 * struct.unpack_from("<Q", enc, len(enc) - 40)[0]
    struct.pack_into("<I", bad, table + 12, 5)  # original length of entry 0
    fails(tmp_path, bytes(bad), "chunk table entry 0")


def test_inconsistent_code_table(tmp_path, stream):
    _, enc = stream
    bad = bytearray(enc)
    bad[16 + 40 + 32] ^= 0x10  # a code length in chunk 0's table: the code is no longer complete
    fails(tmp_path, bytes(bad), "chunk 0")


def test_gap_entry_out_of_range(tmp_path, stream):
    data, enc = stream
    # Chunk 0: header at 16; its gap array follows the code table (4-byte aligned).
    nsym = sum(bin(b).count("1") for b in enc[56:88])
    gap_off = 16 + ((40 + 32 + (nsym + 1) // 2 + 3) & ~3)
    bad = bytearray(enc)
    bad[gap_off + 10] ^= 0x88  # two entries jump by 8 bits
    fails(tmp_path, bytes(bad), "chunk 0")


def test_sigterm_leaves_no_temporary_file(tmp_path):
    gen = subprocess.Popen([sys.executable, "-c", "import sys\nwhile True: sys.stdout.buffer.write(b'abcdefgh' * 100000)"],
                           stdout=subprocess.PIPE)
    enc = subprocess.Popen([ENC, "-o", str(tmp_path / "out.huf")], stdin=gen.stdout, stderr=subprocess.PIPE)
    time.sleep(1.0)
    enc.send_signal(signal.SIGTERM)
    enc.wait(timeout=30)
    gen.kill()
    assert enc.returncode != 0
    assert os.listdir(tmp_path) == []


def test_special_and_odd_outputs(tmp_path):
    src = tmp_path / "a.txt"
    src.write_bytes(b"abc" * 1000)
    fifo = tmp_path / "ff"
    os.mkfifo(fifo)
    p = run([ENC, "-f", "-o", fifo, src], check=False)
    assert p.returncode == 3 and b"not a regular file" in p.stderr
    assert os.path.exists(fifo) and not os.path.isfile(fifo)
    (tmp_path / "d").mkdir()
    p = run([ENC, "-o", tmp_path / "d", src], check=False)
    assert p.returncode == 3 and b"is a directory" in p.stderr
    (tmp_path / ".huf").write_bytes(encode(b"xyz"))
    p = run([DEC, tmp_path / ".huf"], check=False)
    assert p.returncode == 1 and b"does not end in .huf" in p.stderr
    p = run([ENC, "-k", "--rm", src], check=False)
    assert p.returncode == 1 and src.exists()
