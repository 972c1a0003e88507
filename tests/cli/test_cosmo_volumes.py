"""scripts/data/cosmo_volumes.py (the CosmoFlow-like volumes) and scripts/data/cosmo_baseline.py, run as a
user runs them: the files' shapes, types and particle counts, byte-identical output from a seed for any
--workers, the targets' mapping back to the drawn parameters, the z = 0 Gaussian field's power spectrum
against colossus's P(k), sigma_8 against the count variance, the baseline's figures against numpy, and
bad inputs that must fail before anything is written."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "data")
GEN = os.path.join(DATA, "cosmo_volumes.py")
BASELINE = os.path.join(DATA, "cosmo_baseline.py")

spec = importlib.util.spec_from_file_location("cosmo_volumes", GEN)
cv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cv)

FILES = ["train_volumes.npy", "train_targets.npy", "train_params.npy",
         "test_volumes.npy", "test_targets.npy", "test_params.npy", "cosmo_volumes.json"]
SIZE, TRAIN, TEST, SEED = 32, 12, 4, 3


def run(script, *args):
    return subprocess.run([sys.executable, script, *map(str, args)], capture_output=True, text=True)


def generate(out, *extra, seed=SEED, workers=1):
    p = run(GEN, "--out", out, "--size", SIZE, "--samples", TRAIN, "--test-samples", TEST, "--seed", seed,
            "--workers", workers, *extra)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def snapshot(folder):
    """name -> (bytes, mtime) of every entry of folder."""
    out = {}
    for f in sorted(os.listdir(folder)):
        path = os.path.join(folder, f)
        with open(path, "rb") as fh:
            out[f] = (fh.read(), os.stat(path).st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("cosmo")
    dirs = {"a": str(root / "a"), "b": str(root / "b"), "c": str(root / "c")}
    reports = {"a": generate(dirs["a"]), "b": generate(dirs["b"], workers=2), "c": generate(dirs["c"], seed=SEED + 1)}
    return dirs, reports


def load(folder, name):
    return np.load(os.path.join(folder, name))


def test_files_shapes_and_types(sets):
    dirs, reports = sets
    assert sorted(os.listdir(dirs["a"])) == sorted(FILES)  # and no temporary file left
    for split, m in (("train", TRAIN), ("test", TEST)):
        v, t, p = (load(dirs["a"], f"{split}_{k}.npy") for k in ("volumes", "targets", "params"))
        assert v.shape == (m, 4, SIZE, SIZE, SIZE) and v.dtype == np.int16
        assert t.shape == (m, 4) and t.dtype == np.float32
        assert p.shape == (m, 4) and p.dtype == np.float64
        assert v.min() >= 0
    meta = json.load(open(os.path.join(dirs["a"], "cosmo_volumes.json")))
    assert meta["redshifts"] == [0.0, 0.5, 1.5, 3.0] and meta["size"] == SIZE and meta["seed"] == SEED
    assert meta["params"] == ["Omega_m", "sigma_8", "n_s", "h"] and meta["box_size_mpc_h"] == 128.0
    assert meta["version"] == cv.GENERATOR_VERSION and meta["train_samples"] == TRAIN
    assert reports["a"]["cpu_seconds_per_sample"] > 0


def test_particle_count_conserved_per_channel(sets):
    dirs, _ = sets
    for split in ("train", "test"):
        v = load(dirs["a"], f"{split}_volumes.npy")
        assert (v.reshape(len(v), 4, -1).sum(axis=2, dtype=np.int64) == SIZE ** 3).all()
        # the channels differ: the particles moved, and by more at low redshift
        var = v.reshape(len(v), 4, -1).astype(np.float64).var(axis=2).mean(axis=0)
        assert var[3] > 0 and np.all(np.diff(var) < 0)


def test_same_seed_same_bytes_for_any_workers_other_seed_differs(sets):
    dirs, _ = sets
    a, b = snapshot(dirs["a"]), snapshot(dirs["b"])
    assert {f: v[0] for f, v in a.items()} == {f: v[0] for f, v in b.items()}
    c = snapshot(dirs["c"])
    for f in FILES[:-1]:
        assert a[f][0] != c[f][0], f


def test_targets_map_back_to_the_drawn_parameters(sets):
    dirs, _ = sets
    meta = json.load(open(os.path.join(dirs["a"], "cosmo_volumes.json")))
    lo = np.array([meta["ranges"][p][0] for p in meta["params"]])
    hi = np.array([meta["ranges"][p][1] for p in meta["params"]])
    for split, m in (("train", TRAIN), ("test", TEST)):
        t, p = load(dirs["a"], f"{split}_targets.npy"), load(dirs["a"], f"{split}_params.npy")
        assert (t >= -1).all() and (t <= 1).all() and (p >= lo).all() and (p <= hi).all()
        np.testing.assert_allclose(lo + (t.astype(np.float64) + 1) / 2 * (hi - lo), p, rtol=0, atol=1e-7)
        for i in range(m):  # the parameters are the sample's seed sequence's first four doubles
            rng = np.random.default_rng(np.random.SeedSequence([SEED, {"train": 0, "test": 1}[split], i]))
            np.testing.assert_array_equal(p[i], lo + (hi - lo) * rng.random(4))


def test_power_spectrum_of_the_gaussian_field_matches_colossus():
    """The z = 0 field's shell-averaged |delta_k|^2 V / n^6 on a 64^3 grid (4 realisations) against the
    mean of colossus's own P(|k|) (matterPowerSpectrum, eisenstein98) over the same modes."""
    from colossus.cosmology import cosmology
    n, box, params = 64, 128.0, (0.3, 0.8, 0.96, 0.7)
    ref = cosmology.Cosmology(name="test", flat=True, Om0=0.3, Ob0=cv.FIXED["Omega_b"], H0=70.0, sigma8=0.8, ns=0.96,
                              Tcmb0=cv.FIXED["Tcmb0"], Neff=cv.FIXED["Neff"], interpolation=False, persistence="")
    m = np.fft.fftfreq(n, 1.0 / n).astype(int)
    mz = np.fft.rfftfreq(n, 1.0 / n).astype(int)
    m2 = m[:, None, None] ** 2 + m[None, :, None] ** 2 + mz[None, None, :] ** 2  # |k|^2 / k_f^2
    shell = np.rint(np.sqrt(m2)).astype(int)
    power = np.zeros(m2.shape)
    reals = 4
    for seed in range(reals):
        delta = cv.linear_field(params, np.random.default_rng(seed), n, box)
        assert delta.shape == (n, n, n) and abs(delta.mean()) < 1e-12
        power += np.abs(np.fft.rfftn(delta)) ** 2 * box ** 3 / n ** 6 / reals
    values = np.unique(m2[m2 > 0])  # colossus at each distinct |k| (it is slow on 10^5 values)
    table = np.zeros(values.max() + 1)
    table[values] = ref.matterPowerSpectrum(2 * np.pi / box * np.sqrt(values), z=0.0, model="eisenstein98")
    expected = table[m2]
    ratios, weights = [], []
    for s in range(2, n // 2):
        sel = shell == s
        modes = sel.sum() * reals
        r = power[sel].mean() / expected[sel].mean()
        assert abs(r - 1) < 5 / np.sqrt(modes) + 0.01, (s, r, modes)
        ratios.append(r)
        weights.append(modes)
    assert abs(np.average(ratios, weights=weights) - 1) < 0.01


def test_higher_sigma8_gives_higher_count_variance():
    """Same phases, other parameters fixed: the voxel count variance of every channel rises with sigma_8
    (averaged over 3 seeds)."""
    variances = []
    for s8 in (0.7, 0.8, 0.9):
        v = [cv.make_volume(np.array([0.3, s8, 0.95, 0.7]), np.random.default_rng(seed), SIZE, cv.BOX_MPC_H)
             for seed in range(3)]
        variances.append(np.mean([x.reshape(4, -1).astype(np.float64).var(axis=1) for x in v], axis=0))
    assert np.all(np.diff(np.array(variances), axis=0) > 0), variances


def test_baseline_prints_its_figures_and_they_match_numpy(sets):
    dirs, _ = sets
    p = run(BASELINE, dirs["a"])
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    for key in ("mse", "mae", "mae_per_target", "correlation", "train", "test", "targets"):
        assert key in r
    assert r["targets"] == ["Omega_m", "sigma_8", "n_s", "h"] and (r["train"], r["test"]) == (TRAIN, TEST)

    def feats(split):
        x = np.log1p(load(dirs["a"], f"{split}_volumes.npy").astype(np.float64)).reshape(-1, 4, SIZE ** 3)
        f = np.stack([x.mean(axis=2), x.var(axis=2)], axis=2).reshape(len(x), 8)
        return np.hstack([np.ones((len(f), 1)), f])

    coef = np.linalg.lstsq(feats("train"), load(dirs["a"], "train_targets.npy").astype(np.float64), rcond=None)[0]
    pred = feats("test") @ coef
    err = pred - load(dirs["a"], "test_targets.npy")
    assert r["mae"] == pytest.approx(np.abs(err).mean(), rel=1e-9)
    assert r["mse"] == pytest.approx((err ** 2).mean(), rel=1e-9)
    np.testing.assert_allclose(r["mae_per_target"], np.abs(err).mean(axis=0), rtol=1e-9)
    y = load(dirs["a"], "test_targets.npy")
    np.testing.assert_allclose(r["correlation"], [np.corrcoef(pred[:, j], y[:, j])[0, 1] for j in range(4)], rtol=1e-7)


@pytest.mark.parametrize("args, message", [
    (["--size", "48"], "power of two"),
    (["--size", "512"], "power of two"),
    (["--samples", "0"], "--samples"),
    (["--test-samples", "-1"], "--test-samples"),
    (["--workers", "0"], "--workers"),
    (["--seed", "x"], "--seed"),
    (["--box-size", "-5"], "--box-size"),
])
def test_bad_flags_fail_before_writing(tmp_path, args, message):
    out = tmp_path / "out"
    p = run(GEN, "--out", out, "--samples", 2, "--test-samples", 1, *args)
    assert p.returncode == 1 and message in p.stderr and "error" in p.stderr
    assert p.stdout == "" and not out.exists()


def test_existing_output_needs_force(sets, tmp_path):
    dirs, _ = sets
    before = snapshot(dirs["a"])
    p = run(GEN, "--out", dirs["a"], "--size", SIZE, "--samples", TRAIN, "--test-samples", TEST, "--seed", SEED)
    assert p.returncode == 1 and "exists" in p.stderr and "--force" in p.stderr
    assert snapshot(dirs["a"]) == before  # nothing written, nothing left behind
    generate(dirs["a"], "--force")
    after = snapshot(dirs["a"])
    assert {f: v[0] for f, v in after.items()} == {f: v[0] for f, v in before.items()}
    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = run(GEN, "--out", blocker / "sub", "--samples", 2, "--test-samples", 1)
    assert p.returncode == 3 and "not a folder" in p.stderr
