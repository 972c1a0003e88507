"""scripts/data/cosmo_hdf5.py (CosmoFlow HDF5 universes -> the toolkit's [N, C, D, H, W] int16 volumes and
[N, K] float32 targets), run as a user runs it, on small HDF5 files in the real layout ('full' [E, E, E, 4]
integer counts, 'unitPar' [4]): the shapes and types, every sub-volume against the slice cut from the cube
here with numpy (and against the reference's np.split order), the targets repeated per sub-volume, and
bad inputs (missing datasets, wrong ranks, non-integer or out-of-range counts, NaN/Inf targets, empty,
truncated and corrupt files, a --size that does not divide the edge) that must fail with status 1, a
message naming the file and the dataset, and no output or temporary file left behind."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

CONVERT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "data", "cosmo_hdf5.py")
EDGE, CHANNELS, SIZE = 16, 4, 8
N = EDGE // SIZE  # 2 per axis: 8 sub-volumes per file
OUTPUTS = ["train_volumes.npy", "train_targets.npy", "train_cosmo_hdf5.json"]


def run(*args):
    return subprocess.run([sys.executable, CONVERT, *map(str, args)], capture_output=True, text=True)


def universe(seed, edge=EDGE, channels=CHANNELS, dtype=np.int16):
    """Counts [E, E, E, C] with values up to ~700 (both bytes of an int16 in use) and 4 targets."""
    rng = np.random.default_rng(seed)
    full = rng.poisson(rng.uniform(0.5, 40.0, size=(edge, edge, edge, channels)) ** 1.7).astype(dtype)
    return full, rng.uniform(-1, 1, size=4).astype(np.float32)


def write_h5(path, full=None, unit=None, seed=0, **kw):
    if full is None and unit is None:
        full, unit = universe(seed)
    with h5py.File(path, "w") as f:
        if full is not None:
            f.create_dataset("full", data=full, **kw)
        if unit is not None:
            f.create_dataset("unitPar", data=unit)
    return path


def expected(full, size=SIZE):
    """Sub-volumes of one cube in index order (a n + b) n + c, channels first: plain slicing."""
    n = full.shape[0] // size
    out = []
    for a in range(n):
        for b in range(n):
            for c in range(n):
                out.append(full[a * size:(a + 1) * size, b * size:(b + 1) * size, c * size:(c + 1) * size, :]
                           .transpose(3, 0, 1, 2))
    return np.stack(out)


def reference_split(x, size):
    """mlcommons/hpc cosmoflow/prepare.py's split_universe, as it is there."""
    n = x.shape[0] // size
    for xi in np.split(x, n, axis=0):
        for xij in np.split(xi, n, axis=1):
            for xijk in np.split(xij, n, axis=2):
                yield xijk


def assert_failed(p, out, *words):
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    for w in words:
        assert w in p.stderr, (w, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.stdout == ""
    if os.path.isdir(out):
        assert os.listdir(out) == [], os.listdir(out)  # no output, no temporary file
    else:
        assert not os.path.exists(out)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("h5")
    cubes = [universe(seed) for seed in (1, 2, 3)]
    paths = [write_h5(str(root / f"univ_{i}.hdf5"), full, unit) for i, (full, unit) in enumerate(cubes)]
    out = str(root / "out")
    p = run("--out", out, "--size", SIZE, *paths)
    assert p.returncode == 0, p.stderr
    return cubes, paths, out, json.loads(p.stdout)


def test_shapes_and_types(converted):
    cubes, paths, out, report = converted
    assert sorted(os.listdir(out)) == sorted(OUTPUTS)
    v = np.load(os.path.join(out, "train_volumes.npy"))
    t = np.load(os.path.join(out, "train_targets.npy"))
    assert v.dtype == np.int16 and v.shape == (3 * N ** 3, CHANNELS, SIZE, SIZE, SIZE)
    assert t.dtype == np.float32 and t.shape == (3 * N ** 3, 4)
    assert report["samples"] == 24 and report["edge"] == EDGE and report["size"] == SIZE
    assert report["bytes"] == sum(os.path.getsize(os.path.join(out, f)) for f in OUTPUTS)


def test_sub_volumes_are_the_slices(converted):
    cubes, paths, out, _ = converted
    v = np.load(os.path.join(out, "train_volumes.npy"))
    for j, (full, _) in enumerate(cubes):
        mine = v[j * N ** 3:(j + 1) * N ** 3]
        np.testing.assert_array_equal(mine, expected(full))
        ref = np.stack([s.transpose(3, 0, 1, 2) for s in reference_split(full, SIZE)])
        np.testing.assert_array_equal(mine, ref)
        # sample 1 is the next cube along the last spatial axis (Z = W), channel 2 is the cube's channel 2
        np.testing.assert_array_equal(mine[1, 2], full[:SIZE, :SIZE, SIZE:2 * SIZE, 2])
    assert int(v.max()) > 255  # the high byte is exercised


def test_targets_repeated_per_sub_volume(converted):
    cubes, paths, out, _ = converted
    t = np.load(os.path.join(out, "train_targets.npy"))
    for j, (_, unit) in enumerate(cubes):
        np.testing.assert_array_equal(t[j * N ** 3:(j + 1) * N ** 3], np.tile(unit, (N ** 3, 1)))


def test_card(converted):
    cubes, paths, out, _ = converted
    with open(os.path.join(out, "train_cosmo_hdf5.json")) as f:
        card = json.load(f)
    assert card["size"] == SIZE and card["per_file"] == N ** 3 and card["samples"] == 24
    assert card["input"]["edge"] == EDGE and card["input"]["channels"] == CHANNELS
    assert [s["file"] for s in card["sources"]] == [os.path.abspath(p) for p in paths]
    assert [s["samples"] for s in card["sources"]] == [[0, 8], [8, 16], [16, 24]]
    np.testing.assert_array_equal(np.float32(card["sources"][1]["unitPar"]), cubes[1][1])


def test_folder_input_sorted_and_prefix_and_wider_dtype(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    f0, u0 = universe(5, dtype=np.int32)  # int32 counts within int16's range are accepted
    f1, u1 = universe(6, dtype=np.uint16)
    write_h5(str(src / "sub" / "b.h5"), f1, u1.astype(np.float64))  # float64 unitPar -> float32
    write_h5(str(src / "a.hdf5"), f0, u0, chunks=(4, 16, 16, 4), compression="gzip")
    (src / "notes.txt").write_text("not an input")
    out = str(tmp_path / "out")
    p = run("--out", out, "--size", 4, "--prefix", "test", str(src))
    assert p.returncode == 0, p.stderr
    v = np.load(os.path.join(out, "test_volumes.npy"))
    t = np.load(os.path.join(out, "test_targets.npy"))
    assert v.dtype == np.int16 and v.shape == (128, CHANNELS, 4, 4, 4)
    np.testing.assert_array_equal(v[:64], expected(f0, 4))   # a.hdf5 before sub/b.h5 (sorted paths)
    np.testing.assert_array_equal(v[64:], expected(f1, 4))
    np.testing.assert_array_equal(t, np.concatenate([np.tile(u0, (64, 1)), np.tile(u1, (64, 1))]))


def test_whole_cube_as_one_sample(tmp_path):
    full, unit = universe(7)
    out = str(tmp_path / "out")
    p = run("--out", out, "--size", EDGE, write_h5(str(tmp_path / "u.hdf5"), full, unit))
    assert p.returncode == 0, p.stderr
    np.testing.assert_array_equal(np.load(os.path.join(out, "train_volumes.npy"))[0], full.transpose(3, 0, 1, 2))


def test_existing_output_needs_force(converted, tmp_path):
    cubes, paths, out, _ = converted
    before = {f: os.path.getmtime(os.path.join(out, f)) for f in OUTPUTS}
    p = run("--out", out, "--size", SIZE, paths[0])
    assert p.returncode == 1 and "--force" in p.stderr
    assert {f: os.path.getmtime(os.path.join(out, f)) for f in OUTPUTS} == before
    copy = str(tmp_path / "copy")
    assert run("--out", copy, "--size", SIZE, paths[0]).returncode == 0
    p = run("--out", copy, "--size", SIZE, "--force", *paths[1:])
    assert p.returncode == 0, p.stderr
    assert np.load(os.path.join(copy, "train_volumes.npy")).shape[0] == 16


# ---- bad input -----------------------------------------------------------------------------------
def good(tmp_path, name="good.hdf5", seed=11):
    return write_h5(str(tmp_path / name), seed=seed)


def test_size_must_divide_edge(tmp_path):
    src = good(tmp_path)
    for size in (5, 128):  # 128: the default, larger than these 16^3 cubes
        out = str(tmp_path / f"out{size}")
        args = ["--out", out, src] if size == 128 else ["--out", out, "--size", size, src]
        assert_failed(run(*args), out, f"--size {size} does not divide the cube edge 16", "good.hdf5", "'full'")
    for bad in ("0", "x"):
        assert_failed(run("--out", str(tmp_path / "o"), "--size", bad, src), str(tmp_path / "o"), "--size")


@pytest.mark.parametrize("case,words", [
    ("no_full", ["no dataset 'full'", "unitPar"]),
    ("no_unitpar", ["no dataset 'unitPar'"]),
    ("full_rank3", ["dataset 'full' has rank 3"]),
    ("full_not_cube", ["dataset 'full' has shape (16, 16, 8, 4)", "cube"]),
    ("channels_first", ["dataset 'full' has shape (4, 16, 16, 16)", "cube"]),
    ("full_float", ["dataset 'full' has dtype float32", "integer"]),
    ("unitpar_rank2", ["dataset 'unitPar' has shape (1, 4)"]),
    ("unitpar_nan", ["dataset 'unitPar'", "not finite", "nan"]),
    ("unitpar_inf", ["dataset 'unitPar'", "not finite", "inf"]),
    ("unitpar_f64_overflow", ["dataset 'unitPar'", "not finite", "1e+300"]),
    ("counts_over_int16", ["dataset 'full' holds 40000", "outside int16"]),
    ("counts_under_int16", ["dataset 'full' holds -40000", "outside int16"]),
    ("other_edge", ["dataset 'full' is 8^3 x 4", "16^3 x 4"]),
    ("other_k", ["dataset 'unitPar' has 3 values", "has 4"]),
])
def test_bad_dataset(tmp_path, case, words):
    full, unit = universe(12)
    path = str(tmp_path / f"{case}.hdf5")
    if case == "no_full":
        write_h5(path, None, unit)
    elif case == "no_unitpar":
        write_h5(path, full, None)
    elif case == "full_rank3":
        write_h5(path, full[..., 0], unit)
    elif case == "full_not_cube":
        write_h5(path, full[:, :, :8], unit)
    elif case == "channels_first":
        write_h5(path, np.ascontiguousarray(full.transpose(3, 0, 1, 2)), unit)
    elif case == "full_float":
        write_h5(path, full.astype(np.float32), unit)
    elif case == "unitpar_rank2":
        write_h5(path, full, unit[None])
    elif case == "unitpar_nan":
        unit[2] = np.nan
        write_h5(path, full, unit)
    elif case == "unitpar_inf":
        unit[1] = np.inf
        write_h5(path, full, unit)
    elif case == "unitpar_f64_overflow":
        u = unit.astype(np.float64)
        u[0] = 1e300
        write_h5(path, full, u)
    elif case == "counts_over_int16":
        f = full.astype(np.int32)
        f[13, 2, 3, 1] = 40000  # in the second slab, so the first file's copy has already begun
        write_h5(path, f, unit)
        words = words + ["[13, 2, 3, 1]"]
    elif case == "counts_under_int16":
        f = full.astype(np.int32)
        f[0, 0, 0, 0] = -40000
        write_h5(path, f, unit)
    elif case == "other_edge":
        write_h5(path, universe(13, edge=8)[0], unit)
    elif case == "other_k":
        write_h5(path, full, unit[:3])
    # a good file first: the bad one must still leave nothing behind
    out = str(tmp_path / "out")
    assert_failed(run("--out", out, "--size", SIZE, good(tmp_path), path), out, f"{case}.hdf5", *words)
    # and into an existing folder that holds other files: they stay, nothing is added
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "other.txt").write_text("x")
    p = run("--out", str(keep), "--size", SIZE, good(tmp_path), path)
    assert p.returncode == 1 and os.listdir(keep) == ["other.txt"], (p.stderr, os.listdir(keep))


def test_uint16_counts_over_int16(tmp_path):
    full, unit = universe(14, dtype=np.uint16)
    full[15, 15, 15, 3] = 65535
    path = write_h5(str(tmp_path / "u16.hdf5"), full, unit)
    out = str(tmp_path / "out")
    assert_failed(run("--out", out, "--size", SIZE, path), out, "u16.hdf5", "'full' holds 65535", "[15, 15, 15, 3]")


def test_empty_truncated_and_corrupt_files(tmp_path):
    src = good(tmp_path)
    raw = open(src, "rb").read()
    cases = {
        "empty.hdf5": (b"", ["empty.hdf5", "empty file"]),
        "truncated.hdf5": (raw[:len(raw) // 2], ["truncated.hdf5", "cannot open as HDF5"]),
        "header_only.hdf5": (raw[:1024], ["header_only.hdf5", "cannot open as HDF5"]),
        "garbage.hdf5": (np.random.default_rng(0).bytes(4096), ["garbage.hdf5", "cannot open as HDF5"]),
        "text.hdf5": (b"full,unitPar\n1,2\n", ["text.hdf5", "cannot open as HDF5"]),
    }
    for name, (data, words) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        out = str(tmp_path / f"out_{name}")
        assert_failed(run("--out", out, "--size", SIZE, src, str(path)), out, *words)


def test_corrupt_chunk_found_while_copying(tmp_path):
    """The header and unitPar read fine; the damage is in the last compressed chunk of 'full' in the
    second file, so the first file's sub-volumes are already in the temporary output."""
    full, unit = universe(15)
    path = write_h5(str(tmp_path / "chunky.hdf5"), full, unit, chunks=(8, 16, 16, 4), compression="gzip")
    with h5py.File(path, "r") as f:
        info = f["full"].id.get_chunk_info(f["full"].id.get_num_chunks() - 1)
    with open(path, "r+b") as f:
        f.seek(info.byte_offset)
        f.write(b"\xff" * info.size)
    out = str(tmp_path / "out")
    assert_failed(run("--out", out, "--size", SIZE, good(tmp_path), path), out,
                  "chunky.hdf5", "dataset 'full' unreadable at X 8..15")


def test_missing_input_and_empty_folder(tmp_path):
    out = str(tmp_path / "out")
    assert_failed(run("--out", out, str(tmp_path / "nope.hdf5")), out, "nope.hdf5", "does not exist")
    (tmp_path / "empty").mkdir()
    assert_failed(run("--out", out, str(tmp_path / "empty")), out, "holds no *.hdf5")
