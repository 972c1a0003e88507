"""huffgpu-encode / huffgpu-decode as a user runs them: files, pipes, flags, bad input.

Needs only the Python standard library and pytest (no onnx, no numpy): scripts/gpu-check.sh runs
it against the codec-only build on the GPU machine too, where --device auto picks the GPU."""
import glob
import gzip
import hashlib
import json
import os
import pty
import random
import re
import signal
import stat
import struct
import subprocess
import sys
import time

import pytest

BIN_DIR = os.environ.get("HPCNN_BIN_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build", "tools"))
DATA = os.path.join(os.path.dirname(__file__), "..", "data")
FILES = ["alice29.txt", "html", "geo.protodata", "kppkn.gtb", "fireworks.jpeg"]
FASHION = os.environ.get("HPCNN_FASHION_MNIST", "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
ENC, DEC = (os.path.join(BIN_DIR, t, t) for t in ("huffgpu-encode", "huffgpu-decode"))


def fashion_images():
    if not os.path.exists(FASHION):
        pytest.skip(f"no Fashion-MNIST training images at {FASHION} (dataset-fashion-mnist; or set HPCNN_FASHION_MNIST)")
    return gzip.open(FASHION).read()


def gpu_visible():
    """Whether a CUDA device is visible to this process, decided without our tools. The rule:
    CUDA_VISIBLE_DEVICES set to an empty list or starting with -1 hides every device (as the CUDA
    runtime reads it); otherwise a device node /dev/nvidia<N>, or a "GPU <n>: ..." line from
    `nvidia-smi -L`, shows one."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and (cvd.strip() == "" or cvd.strip().startswith("-1")):
        return False
    if glob.glob("/dev/nvidia[0-9]*"):
        return True
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(line.startswith("GPU ") for line in out.splitlines())


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
    images = fashion_images()
    assert len(images) == 47040016
    enc = encode(images)
    assert len(enc) < len(images)
    assert decode(enc) == images
    assert decode(encode(images, "--no-gap-array", "--chunk-size", "1M")) == images


def test_same_bytes_for_every_thread_count():
    data = fashion_images()[:20_000_000]
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
                                  random.Random(0).randbytes(1 << 20)],
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


def test_an_output_that_is_another_input_is_refused(tmp_path):
    """`-f b b.huf` would replace b.huf before reading it as the next input, `-f a.huf a` the input
    a.huf after reading it: the whole command is refused (exit 1) before any file is touched."""
    for n in ("a", "b"):
        (tmp_path / n).write_bytes(n.encode() * 500)
    (tmp_path / "b.huf").write_bytes(b"precious")
    (tmp_path / "a.huf").write_bytes(b"precious too")
    for args in ([tmp_path / "b", tmp_path / "b.huf"], [tmp_path / "a.huf", tmp_path / "a"]):
        p = run([ENC, "-f", *args], check=False)
        assert p.returncode == 1, p.stderr
        assert b"which is also an input" in p.stderr and b"nothing was encoded" in p.stderr, p.stderr
        assert (tmp_path / "b.huf").read_bytes() == b"precious" and (tmp_path / "a.huf").read_bytes() == b"precious too"
        assert not (tmp_path / "a.huf.huf").exists()
    # The same file named twice by another path is caught through its inode.
    os.symlink(tmp_path / "b.huf", tmp_path / "link.huf")
    p = run([ENC, "-f", tmp_path / "b", tmp_path / "link.huf"], check=False)
    assert p.returncode == 1 and b"also an input" in p.stderr and (tmp_path / "b.huf").read_bytes() == b"precious"
    # Decoding: x.huf -> x where x is a later input.
    (tmp_path / "x").write_bytes(b"x" * 100)
    run([ENC, tmp_path / "x"])
    p = run([DEC, "-f", tmp_path / "x.huf", tmp_path / "x"], check=False)
    assert p.returncode == 1 and b"nothing was decoded" in p.stderr and (tmp_path / "x").read_bytes() == b"x" * 100


def test_a_leading_dash_is_an_option_unless_after_double_dash(tmp_path):
    """One rule for names that start with '-': before `--` an option (unknown: exit 1, nothing
    written), after `--` a file, for -x.txt and -10.txt alike (CLI11 lets -<digit> through as a number)."""
    for name in ("-10.txt", "-x.txt"):
        (tmp_path / name).write_bytes(b"dash " * 100)
        p = subprocess.run([ENC, name], cwd=tmp_path, capture_output=True)
        assert p.returncode == 1, (name, p.stderr)
        assert b"Run with --help" in p.stderr and name.encode() in p.stderr, p.stderr
        assert not (tmp_path / (name + ".huf")).exists()
        p = subprocess.run([ENC, "--", name], cwd=tmp_path, capture_output=True)
        assert p.returncode == 0, p.stderr
        assert (tmp_path / (name + ".huf")).exists()
        p = subprocess.run([DEC, "-c", "--", name + ".huf"], cwd=tmp_path, capture_output=True)
        assert p.returncode == 0 and p.stdout == b"dash " * 100
    # A negative number as an option's value is still a value (and checked as one).
    p = run([ENC, "-T", "-1", tmp_path / "-x.txt"], check=False)
    assert p.returncode == 1 and b"-10.txt" not in p.stderr


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
    data = open(os.path.join(DATA, "alice29.txt"), "rb").read()
    assert decode(encode(data, "--device", "auto")) == data
    p = run([ENC, "-c", "--device", "cuda"], data, check=False)
    if not gpu_visible() or b"this build has no CUDA codec" in p.stderr:
        # No device (see gpu_visible for the rule), or a build without the CUDA codec: exit 5.
        assert p.returncode == 5 and p.stdout == b"", p.stderr
        assert b"huffgpu-encode: error: --device cuda: " in p.stderr and b"CUDA" in p.stderr, p.stderr
    else:
        # A visible GPU: the CUDA codec writes the CPU codec's bytes, and its decoder reads them.
        assert p.returncode == 0, p.stderr
        assert p.stdout == encode(data, "--device", "cpu")
        assert decode(p.stdout, "--device", "cuda") == data


def test_log_lines_only_under_v():
    """A plain run writes nothing on stderr (also when --device auto falls back to the CPU); the
    fallback and its reason are logged under -v."""
    data = open(os.path.join(DATA, "html"), "rb").read()
    p = run([ENC, "-c"], data)
    assert p.stderr == b""
    assert run([DEC, "-c"], p.stdout).stderr == b""
    falls_back = run([ENC, "-c", "--device", "cuda"], b"x", check=False).returncode != 0
    if not gpu_visible():
        assert falls_back
    for tool_, input_ in ((ENC, data), (DEC, p.stdout)):
        v = run([tool_, "-c", "-v"], input_).stderr.decode()
        assert bool(re.search(r"--device auto: .+; using the CPU codec", v)) == falls_back, v


def test_data_that_grow_are_named_with_the_reason(tmp_path):
    """Encoding data that do not compress warns on stderr with both sizes (and, for a compressed
    format such as gzip, says so and how to do better); -q silences it; the output is still valid."""
    import gzip as gz
    data = open(os.path.join(DATA, "html"), "rb").read()
    (tmp_path / "a.gz").write_bytes(gz.compress(data))
    p = run([ENC, tmp_path / "a.gz"])
    size_in, size_out = (tmp_path / "a.gz").stat().st_size, (tmp_path / "a.gz.huf").stat().st_size
    assert size_out > size_in
    msg = p.stderr.decode()
    assert f"a.gz: {size_in} -> {size_out} bytes" in msg and "gzip-compressed already" in msg and "gzip -dc" in msg, msg
    assert run([DEC, "-c", tmp_path / "a.gz.huf"]).stdout == (tmp_path / "a.gz").read_bytes()
    assert run([ENC, "-f", "-q", tmp_path / "a.gz"]).stderr == b""
    (tmp_path / "r.bin").write_bytes(random.Random(3).randbytes(50000))
    assert b"do not compress (random or compressed data)" in run([ENC, tmp_path / "r.bin"]).stderr


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
    rng = random.Random(5)
    for _ in range(60):
        bad = bytearray(enc)
        bad[rng.randrange(len(enc))] ^= 1 << rng.randrange(8)
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


def chunk0_tables(enc):
    """Offsets in a version-2 stream of chunk 0's first code-length table and of its gap array
    (lib/huffman/FORMAT.md): header at 16, its block count at 16 + 36, 12 bytes per block, then
    one table per block (32-byte bitmap, a nibble per symbol), the gap array 4-byte aligned."""
    assert enc[4] == 2
    blocks = struct.unpack_from("<I", enc, 16 + 36)[0]
    first = 16 + 40 + 12 * blocks
    pos = first
    for _ in range(blocks):
        nsym = sum(bin(b).count("1") for b in enc[pos:pos + 32])
        pos += 32 + (nsym + 1) // 2
    return first, 16 + ((pos - 16 + 3) & ~3)


def test_inconsistent_code_table(tmp_path, stream):
    _, enc = stream
    bad = bytearray(enc)
    first, _ = chunk0_tables(enc)
    bad[first + 32] ^= 0x10  # a code length in chunk 0's table: the code is no longer complete
    fails(tmp_path, bytes(bad), "chunk 0")


def test_gap_entry_out_of_range(tmp_path, stream):
    data, enc = stream
    _, gap_off = chunk0_tables(enc)
    bad = bytearray(enc)
    bad[gap_off + 10] ^= 0x88  # two entries jump by 8 bits
    fails(tmp_path, bytes(bad), "chunk 0")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_removes_the_temporary_file(tmp_path, sig):
    """The encoder reads a named pipe that the test keeps open (so it waits for more input with its
    temporary output open); once that file is there, the signal must run the clean-up: death by
    the signal, no temporary file, no output, the input untouched."""
    fifo, out_dir = tmp_path / "in", tmp_path / "out"
    os.mkfifo(fifo)
    out_dir.mkdir()
    writer = os.open(fifo, os.O_RDWR)  # a writer that stays: the encoder's read blocks, never sees EOF
    try:
        enc = subprocess.Popen([ENC, "-o", out_dir / "x.huf", fifo], stderr=subprocess.PIPE)
        os.write(writer, b"abcdefgh" * 1000)  # less than a pipe buffer: never blocks
        deadline = time.monotonic() + 60
        while not any(re.fullmatch(r"\.x\.huf\.tmp\.\w{6}", n) for n in os.listdir(out_dir)):
            assert enc.poll() is None, f"the encoder exited {enc.returncode}: {enc.stderr.read()}"
            assert time.monotonic() < deadline, "no temporary output appeared"
            time.sleep(0.005)
        enc.send_signal(sig)
        enc.wait(timeout=30)
    finally:
        os.close(writer)
    assert enc.returncode == -sig, enc.stderr.read()
    assert os.listdir(out_dir) == []
    assert sorted(os.listdir(tmp_path)) == ["in", "out"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


# ---- output permissions, modification times, memory ---------------------------------------------
def run_with_umask(args, umask, data=None):
    p = subprocess.run(list(map(str, args)), input=data, capture_output=True, umask=umask)
    assert p.returncode == 0, (args, p.stderr)
    return p


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755, 0o444], ids=oct)
def test_outputs_keep_mode_and_mtime(tmp_path, mode):
    """As gzip and zstd: an output gets its input's permission bits (never more, whatever the
    umask) and modification time, when encoding and when decoding."""
    src = tmp_path / "a.txt"
    data = open(os.path.join(DATA, "html"), "rb").read()
    src.write_bytes(data)
    os.chmod(src, mode)
    os.utime(src, ns=(1_600_000_000_000_000_000, 1_500_000_000_123_456_789))
    for umask in (0o022, 0o077):
        run_with_umask([ENC, "-f", src], umask)
        enc = (tmp_path / "a.txt.huf").stat()
        assert stat.S_IMODE(enc.st_mode) == mode and enc.st_mtime_ns == src.stat().st_mtime_ns
    os.utime(tmp_path / "a.txt.huf", ns=(1_600_000_000_000_000_000, 1_400_000_000_987_654_321))
    os.chmod(tmp_path / "a.txt.huf", mode & 0o750)
    run_with_umask([DEC, tmp_path / "a.txt.huf", "-o", tmp_path / "back"], 0o022)
    back = (tmp_path / "back").stat()
    assert stat.S_IMODE(back.st_mode) == mode & 0o750
    assert back.st_mtime_ns == (tmp_path / "a.txt.huf").stat().st_mtime_ns
    assert (tmp_path / "back").read_bytes() == data
    assert stat.S_IMODE(src.stat().st_mode) == mode and src.stat().st_mtime_ns // 10**9 == 1_500_000_000  # input untouched


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077], ids=oct)
def test_outputs_from_stdin_follow_the_umask(tmp_path, umask):
    data = b"from a pipe " * 500
    before = time.time_ns()
    run_with_umask([ENC, "-o", tmp_path / "s.huf"], umask, data)
    st = (tmp_path / "s.huf").stat()
    assert stat.S_IMODE(st.st_mode) == 0o644 & ~umask and st.st_mtime_ns >= before - 10**9
    run_with_umask([DEC, "-o", tmp_path / "s"], umask, (tmp_path / "s.huf").read_bytes())
    assert stat.S_IMODE((tmp_path / "s").stat().st_mode) == 0o644 & ~umask
    assert (tmp_path / "s").read_bytes() == data


# Forks and runs argv[1:], then prints its exit code and ru_maxrss (KiB) from os.wait4. A small
# process of its own: Linux carries the peak RSS of the address space a program was exec'd from
# into its ru_maxrss, and the test process (vfork'ed by subprocess) may be hundreds of MiB.
RSS_WRAPPER = """import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)"""


def peak_rss_mib(args):
    """Runs the tool alone; returns its own peak resident set size in MiB."""
    p = subprocess.run([sys.executable, "-c", RSS_WRAPPER, *map(str, args)], capture_output=True, text=True)
    code, kib = map(int, p.stdout.split())
    assert code == 0, p.stderr
    return kib / 1024


def test_memory_follows_the_data(tmp_path):
    """A 3 KB input with --chunk-size 1G costs kilobytes of buffers, not a gigabyte, when encoding
    and when decoding (the CPU codec; the CUDA runtime alone takes more than this bound)."""
    src = tmp_path / "small"
    data = open(os.path.join(DATA, "alice29.txt"), "rb").read()[:3000]
    src.write_bytes(data)
    assert peak_rss_mib([ENC, "--device", "cpu", "--chunk-size", "1G", src]) < 64
    assert struct.unpack_from("<I", (tmp_path / "small.huf").read_bytes(), 8)[0] == 1 << 30  # the chunk size
    assert peak_rss_mib([DEC, "--device", "cpu", "-o", tmp_path / "back", tmp_path / "small.huf"]) < 64
    assert (tmp_path / "back").read_bytes() == data


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
