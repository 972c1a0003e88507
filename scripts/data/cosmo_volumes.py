#!/usr/bin/env python3
"""Writes a CosmoFlow-like data set of 3-D dark-matter particle counts made by linear theory:
for each sample, four cosmological parameters are drawn uniformly, a Gaussian random field with
their linear matter power spectrum is drawn on an N^3 grid, one particle per cell is moved by the
(truncated) Zel'dovich displacement at four redshifts, and the particles are counted per voxel.

  parameters  Omega_m U[0.25, 0.35], sigma_8 U[0.70, 0.90], n_s U[0.90, 1.00], h U[0.60, 0.80]
              (flat LambdaCDM; Omega_b = 0.049, T_cmb = 2.7255 K, N_eff = 3.046 held fixed);
              targets t = 2 (p - lo) / (hi - lo) - 1 in [-1, 1], order Omega_m, sigma_8, n_s, h
  P(k)        linear, Eisenstein & Hu (1998) transfer function with baryons (the colossus package),
              normalised to sigma_8 at z = 0
  box         periodic, 128 Mpc/h a side (--box-size): CosmoFlow's sub-volumes (its 512 Mpc/h,
              512^3-particle simulations cut into 4^3 cubes); N = 128 gives its 1 Mpc/h voxels,
              N = 32 the same volume in 4 Mpc/h voxels
  particles   one per voxel (CosmoFlow's 512^3 particles in 512^3 voxels), at the voxel centres q,
              moved to x = q + D(z) psi_z(q), psi_k = i k / k^2 delta_k; psi_z from the z = 0 field
              under the Gaussian window exp(-k^2 / (2 k_G^2)), k_G = 1.5 k_nl(z) (the truncated
              Zel'dovich approximation; --plain-zeldovich: no window)
  redshifts   z = 0, 0.5, 1.5, 3 (channels 0..3); D(z) the linear growth factor, D(0) = 1
  counting    nearest grid point (a histogram of the positions), int16; each channel sums to N^3

Files in --out (nothing is written when a flag is wrong or an output exists without --force;
each file is written to a temporary file beside it and renamed when all are complete):
  train_volumes.npy  int16   [samples, 4, N, N, N]   (layout N, C, D, H, W)
  train_targets.npy  float32 [samples, 4]            scaled to [-1, 1]
  train_params.npy   float64 [samples, 4]            the drawn parameters, physical units
  test_volumes.npy, test_targets.npy, test_params.npy   the same for --test-samples
  cosmo_volumes.json the ranges, box size, redshifts, seed and generator version

Sample i of split s (train 0, test 1) draws everything from numpy's SeedSequence([seed, s, i]):
the same seed gives byte-identical files for any --workers. stdout: a JSON report with the
measured speed (CPU seconds per sample: one core's time). The data card: docs/data/cosmo-volumes.md.

Usage: cosmo_volumes.py --out DIR [--samples 1000] [--test-samples 100] [--size 32] [--seed 0]
                        [--workers 1] [--box-size 128] [--plain-zeldovich] [--force]
"""
import argparse
import json
import multiprocessing as mp
import os
import signal
import sys
import time
from functools import lru_cache

import numpy as np

GENERATOR = "hpcnn scripts/data/cosmo_volumes.py"
GENERATOR_VERSION = 1
PARAM_NAMES = ("Omega_m", "sigma_8", "n_s", "h")
RANGES = {"Omega_m": (0.25, 0.35), "sigma_8": (0.70, 0.90), "n_s": (0.90, 1.00), "h": (0.60, 0.80)}
FIXED = {"flat": True, "Omega_b": 0.049, "Tcmb0": 2.7255, "Neff": 3.046}
REDSHIFTS = (0.0, 0.5, 1.5, 3.0)
BOX_MPC_H = 128.0  # CosmoFlow's sub-volume: its 512 Mpc/h boxes cut into 4^3 cubes of 128^3 voxels
TZA_KG_OVER_KNL = 1.5  # the Gaussian window of the truncated Zel'dovich approximation, k_G / k_nl
SPLITS = {"train": 0, "test": 1}
SIZES = (8, 16, 32, 64, 128, 256)
INT16_MAX = np.iinfo(np.int16).max


class UsageError(Exception):
    pass


# ---- parameters and targets ----------------------------------------------------------------------
def sample_rng(seed, split, index):
    """The generator of sample `index` of `split` ('train' or 'test'): all of its randomness."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), SPLITS[split], int(index)]))


def bounds(ranges=RANGES):
    lo = np.array([ranges[p][0] for p in PARAM_NAMES], dtype=np.float64)
    hi = np.array([ranges[p][1] for p in PARAM_NAMES], dtype=np.float64)
    return lo, hi


def draw_params(rng, ranges=RANGES):
    """(Omega_m, sigma_8, n_s, h), float64 [4], each uniform in its range (the rng's first 4 doubles)."""
    lo, hi = bounds(ranges)
    return lo + (hi - lo) * rng.random(4)


def to_targets(params, ranges=RANGES):
    """Physical parameters [..., 4] -> targets in [-1, 1] (float32): t = 2 (p - lo) / (hi - lo) - 1."""
    lo, hi = bounds(ranges)
    return (2.0 * (np.asarray(params, dtype=np.float64) - lo) / (hi - lo) - 1.0).astype(np.float32)


def from_targets(targets, ranges=RANGES):
    """The inverse of to_targets (float64)."""
    lo, hi = bounds(ranges)
    return lo + (np.asarray(targets, dtype=np.float64) + 1.0) * 0.5 * (hi - lo)


# ---- linear theory -------------------------------------------------------------------------------
def cosmology(params):
    """The colossus flat LambdaCDM cosmology of (Omega_m, sigma_8, n_s, h); nothing cached on disk."""
    from colossus.cosmology import cosmology as cc
    om, s8, ns, h = (float(v) for v in params)
    return cc.Cosmology(name="cosmo_volumes", flat=True, Om0=om, Ob0=FIXED["Omega_b"], H0=100.0 * h, sigma8=s8,
                        ns=ns, Tcmb0=FIXED["Tcmb0"], Neff=FIXED["Neff"], interpolation=False, persistence="",
                        print_warnings=False)


# ln k (k in h/Mpc) of the sigma_8 and k_nl integrals: a fixed trapezoid rule, within 2e-5 of
# colossus's adaptive integral (matterPowerSpectrumNorm) at 1/30 of its cost.
_LNK = np.linspace(np.log(1e-5), np.log(1e2), 2049)


def power_shape(cosmo, k):
    """k^n_s T(k)^2, T the Eisenstein & Hu (1998) transfer function with baryons (colossus), not
    normalised; k in h/Mpc."""
    from colossus.cosmology import power_spectrum
    return power_spectrum.powerSpectrum(np.asarray(k, dtype=np.float64), "eisenstein98", cosmo, output="ps")


def sigma8_norm(cosmo):
    """A such that A k^n_s T^2 has the top-hat variance sigma_8^2 at R = 8 Mpc/h:
    sigma^2(R) = 1 / (2 pi^2) int P(k) W(kR)^2 k^3 d ln k,  W(x) = 3 (sin x - x cos x) / x^3."""
    k = np.exp(_LNK)
    x = 8.0 * k
    w = 3.0 * (np.sin(x) - x * np.cos(x)) / x ** 3
    sigma2 = np.trapezoid(power_shape(cosmo, k) * w * w * k ** 3, _LNK) / (2.0 * np.pi ** 2)
    return cosmo.sigma8 ** 2 / sigma2


def linear_power(cosmo, k):
    """The linear matter power spectrum at z = 0, (Mpc/h)^3, at k (h/Mpc, > 0): Eisenstein & Hu
    (1998) normalised to the cosmology's sigma_8 (colossus's matterPowerSpectrum(k,
    model='eisenstein98') to 2e-5)."""
    return sigma8_norm(cosmo) * power_shape(cosmo, k)


def nonlinear_wavenumber(cosmo, growth):
    """k_nl (h/Mpc) at each linear growth factor D: D^2 int_0^k_nl Delta^2(k) d ln k = 1, with
    Delta^2 = k^3 P(k) / (2 pi^2) the dimensionless linear power at z = 0 (Melott, Pellman &
    Shandarin 1994, MNRAS 269, 626, eq. 3)."""
    k = np.exp(_LNK)
    d2 = linear_power(cosmo, k) * k ** 3 / (2.0 * np.pi ** 2)
    cum = np.concatenate([[0.0], np.cumsum(0.5 * (d2[1:] + d2[:-1]) * np.diff(_LNK))])
    return np.exp(np.interp(1.0 / np.asarray(growth, dtype=np.float64) ** 2, cum, _LNK))


# ---- the field, the displacement, the counts ------------------------------------------------------
@lru_cache(maxsize=4)
def grid(n, box):
    """Wavenumbers of numpy's rfftn of an n^3 grid of side `box` Mpc/h: (m2, kvec), m2 the integer
    |k|^2 / k_f^2 (k_f = 2 pi / box) [n, n, n//2+1] and kvec the three k components in h/Mpc,
    broadcastable to it, each with its Nyquist entry zeroed (a derivative there has no real value)."""
    m = np.fft.fftfreq(n, 1.0 / n).astype(np.int64)
    mz = np.fft.rfftfreq(n, 1.0 / n).astype(np.int64)
    m2 = m[:, None, None] ** 2 + m[None, :, None] ** 2 + mz[None, None, :] ** 2
    kf = 2.0 * np.pi / box
    kd = np.where(np.abs(m) == n // 2, 0, m) * kf
    kdz = np.where(mz == n // 2, 0, mz) * kf
    return m2, (kd[:, None, None], kd[None, :, None], kdz[None, None, :])


def linear_field_k(cosmo, rng, n, box):
    """The z = 0 linear density contrast delta as numpy's rfftn of the real field, [n, n, n//2+1].

    White noise w(x) ~ N(0, 1) on the grid (n^3 doubles from rng) is Fourier transformed and scaled
    by sqrt(P(|k|) / dV), dV = (box / n)^3, so that <|delta_k|^2> V / n^6 = P(k), V = box^3 (the
    estimator of the test and the data card); the k = 0 mode is zero (the box holds the mean density)."""
    m2, _ = grid(n, box)
    kf = 2.0 * np.pi / box
    table = np.zeros(int(m2.max()) + 1)
    table[1:] = np.sqrt(linear_power(cosmo, np.sqrt(np.arange(1, table.size)) * kf) / (box / n) ** 3)
    white = rng.standard_normal((n, n, n))
    return np.fft.rfftn(white) * table[m2]


def linear_field(params, rng, n, box):
    """The z = 0 linear density contrast in real space, float64 [n, n, n]."""
    return np.fft.irfftn(linear_field_k(cosmology(params), rng, n, box), s=(n, n, n), axes=(0, 1, 2))


def truncate(delta_k, n, box, k_g):
    """The truncated Zel'dovich approximation's window, delta_k exp(-k^2 / (2 k_G^2)) (Coles, Melott &
    Shandarin 1993; the Gaussian window of Melott, Pellman & Shandarin 1994)."""
    m2, _ = grid(n, box)
    kf = 2.0 * np.pi / box
    return delta_k * np.exp(-(m2 * (kf * kf)) / (2.0 * k_g * k_g))


def displacement(delta_k, n, box):
    """The Zel'dovich displacement psi (Mpc/h) of a z = 0 field: psi_k = i k / k^2 delta_k, so that
    div psi = -delta. [3, n, n, n] float64."""
    m2, kvec = grid(n, box)
    kf = 2.0 * np.pi / box
    inv_k2 = np.zeros(m2.shape)
    inv_k2[m2 > 0] = 1.0 / (m2[m2 > 0] * kf * kf)
    base = 1j * delta_k * inv_k2
    return np.stack([np.fft.irfftn(base * k, s=(n, n, n), axes=(0, 1, 2)) for k in kvec])


def count(psi_cells, growth, n):
    """Counts of the n^3 particles, started at the voxel centres and moved by growth * psi (psi in
    voxels), per voxel (nearest grid point, periodic): int16 [n, n, n] summing to n^3."""
    flat = np.zeros(n * n * n, dtype=np.intp)
    centre = np.arange(n, dtype=np.float64) + 0.5
    for axis in range(3):
        shape = [1, 1, 1]
        shape[axis] = n
        cell = np.floor(centre.reshape(shape) + growth * psi_cells[axis]).astype(np.intp) % n
        flat = flat * n + cell.reshape(-1)
    counts = np.bincount(flat, minlength=n * n * n)
    if counts.max() > INT16_MAX:
        raise RuntimeError(f"a voxel holds {counts.max()} particles, more than int16 holds")
    return counts.astype(np.int16).reshape(n, n, n)


def make_volume(params, rng, n, box, redshifts=REDSHIFTS, tza=TZA_KG_OVER_KNL):
    """One sample's volume, int16 [len(redshifts), n, n, n], from the rng after the parameter draw:
    x = q + D(z) psi_z(q), psi_z the displacement of the z = 0 field under the window of
    k_G = tza * k_nl(z) (tza None: plain Zel'dovich, one psi for all z)."""
    cosmo = cosmology(params)
    growth = np.atleast_1d(cosmo.growthFactor(np.asarray(redshifts, dtype=np.float64)))  # D(0) = 1
    delta_k = linear_field_k(cosmo, rng, n, box)
    if tza is None:
        psi_cells = displacement(delta_k, n, box) / (box / n)
        return np.stack([count(psi_cells, g, n) for g in growth])
    channels = []
    for g, k_nl in zip(growth, nonlinear_wavenumber(cosmo, growth)):
        psi_cells = displacement(truncate(delta_k, n, box, tza * k_nl), n, box) / (box / n)
        channels.append(count(psi_cells, g, n))
    return np.stack(channels)


def make_sample(seed, split, index, n, box=BOX_MPC_H, tza=TZA_KG_OVER_KNL):
    """(volume int16 [4, n, n, n], params float64 [4]) of one sample: the same in any process."""
    rng = sample_rng(seed, split, index)
    params = draw_params(rng)
    return make_volume(params, rng, n, box, tza=tza), params


def _worker_signals():
    # The main process handles SIGINT and SIGTERM (removing its temporary files) and ends the pool.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _work(task):
    seed, split, index, n, box, tza = task
    t0 = time.process_time()  # this process's CPU time: one core's, whatever else runs
    volume, params = make_sample(seed, split, index, n, box, tza)
    return index, volume, params, time.process_time() - t0


# ---- files ---------------------------------------------------------------------------------------
SIDECAR = "cosmo_volumes.json"


def file_names(split):
    return {"volumes": f"{split}_volumes.npy", "targets": f"{split}_targets.npy", "params": f"{split}_params.npy"}


def outputs():
    return [f for s in SPLITS for f in file_names(s).values()] + [SIDECAR]


def colossus_version():
    from importlib.metadata import version
    return version("colossus")


def sidecar(args):
    plain = args.tza is None
    return {
        "generator": GENERATOR, "version": GENERATOR_VERSION, "colossus": colossus_version(),
        "params": list(PARAM_NAMES), "ranges": {p: list(RANGES[p]) for p in PARAM_NAMES},
        "sampling": "uniform, independent", "target_scaling": "t = 2 (p - lo) / (hi - lo) - 1",
        "fixed": dict(FIXED, model="flat LambdaCDM"),
        "power_spectrum": "linear, Eisenstein & Hu 1998 transfer function (colossus), normalised to sigma_8 at z = 0",
        "size": args.size, "box_size_mpc_h": args.box_size, "voxel_mpc_h": args.box_size / args.size,
        "particles": args.size ** 3, "particles_per_voxel": 1,
        "displacement": "Zel'dovich: x = q + D(z) psi(q)" if plain else
                        "truncated Zel'dovich: x = q + D(z) psi_z(q), psi_z from the z = 0 field times "
                        "exp(-k^2 / (2 k_G^2)), k_G = tza_kg_over_knl * k_nl(z)",
        "tza_kg_over_knl": args.tza,
        "assignment": "nearest grid point, periodic", "redshifts": list(REDSHIFTS),
        "layout": "volumes [N, C, D, H, W] int16, channel c at redshifts[c]; targets [N, 4] float32; params [N, 4] float64",
        "seed": args.seed, "seeding": "numpy SeedSequence([seed, split (train 0, test 1), index])",
        "train_samples": args.samples, "test_samples": args.test_samples,
        "files": {s: file_names(s) for s in SPLITS},
    }


def fsync_replace(tmp, final):
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)


def generate(args, tmp_paths):
    """Writes every output to a temporary file in --out (listed in tmp_paths for the caller to
    remove on failure), then renames them all; returns the report."""
    n, box = args.size, args.box_size
    plan = []
    for split, m in (("train", args.samples), ("test", args.test_samples)):
        tmp = {k: os.path.join(args.out, f".tmp{os.getpid()}.{v}") for k, v in file_names(split).items()}
        tmp_paths.extend(tmp.values())
        volumes = np.lib.format.open_memmap(tmp["volumes"], mode="w+", dtype=np.int16,
                                            shape=(m, len(REDSHIFTS), n, n, n))
        plan.append((split, tmp, volumes, np.zeros((m, 4), dtype=np.float64)))
    arrays = {split: (volumes, params) for split, _, volumes, params in plan}
    tasks = [(args.seed, split, i, n, box, args.tza) for split, _, _, params in plan for i in range(len(params))]
    total = len(tasks)
    sample_seconds = 0.0
    cosmology(draw_params(sample_rng(0, "train", 0)))  # imports colossus (0.5 s) outside the timing
    t0 = time.perf_counter()
    pool = None
    try:
        if args.workers == 1:
            results = map(_work, tasks)
        else:
            pool = mp.get_context("fork").Pool(args.workers, initializer=_worker_signals)
            results = pool.imap(_work, tasks, chunksize=max(1, min(16, total // (4 * args.workers))))
        tty = sys.stderr.isatty()
        for done, (task, (index, volume, params, seconds)) in enumerate(zip(tasks, results), 1):
            volumes, params_out = arrays[task[1]]
            volumes[index] = volume
            params_out[index] = params
            sample_seconds += seconds
            if tty and (done % 50 == 0 or done == total):
                print(f"\rcosmo_volumes: {done}/{total} samples", end="" if done < total else "\n", file=sys.stderr)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    for split, tmp, volumes, params in plan:
        volumes.flush()
        for key, arr in (("params", params), ("targets", to_targets(params))):
            with open(tmp[key], "wb") as f:
                np.save(f, arr)
    meta = os.path.join(args.out, f".tmp{os.getpid()}.{SIDECAR}")
    tmp_paths.append(meta)
    with open(meta, "w") as f:
        f.write(json.dumps(sidecar(args), indent=1, sort_keys=True) + "\n")
    for split, tmp, *_ in plan:
        for key, name in file_names(split).items():
            fsync_replace(tmp[key], os.path.join(args.out, name))
    fsync_replace(meta, os.path.join(args.out, SIDECAR))
    tmp_paths.clear()
    wall = time.perf_counter() - t0
    return {
        "out": args.out, "size": n, "box_size_mpc_h": box, "train_samples": args.samples,
        "test_samples": args.test_samples, "seed": args.seed, "workers": args.workers,
        "seconds": round(wall, 3),
        "cpu_seconds_per_sample": round(sample_seconds / total, 5),
        "seconds_per_sample_wall": round(wall / total, 5),
        "bytes": sum(os.path.getsize(os.path.join(args.out, f)) for f in outputs()),
    }


# ---- command line --------------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def integer(name, text, minimum=1):
    try:
        v = int(text)
    except ValueError:
        raise UsageError(f"{name} must be an integer, not '{text}'") from None
    if v < minimum:
        raise UsageError(f"{name} must be at least {minimum}, not {v}")
    return v


def parse(argv):
    doc = __doc__.split("\n\n")
    p = Parser(prog="cosmo_volumes.py", description=doc[0], epilog="\n\n".join(doc[1:-1]),
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    p.add_argument("--samples", default="1000", metavar="N", help="training samples, 1 or more (default 1000)")
    p.add_argument("--test-samples", default="100", metavar="N", help="test samples, 0 or more (default 100)")
    p.add_argument("--size", default="32", metavar="N",
                   help="voxels per side, a power of two from 8 to 256: 32, 64, 128 (CosmoFlow's) (default 32)")
    p.add_argument("--box-size", default=str(BOX_MPC_H), metavar="MPC_H",
                   help=f"periodic box side in Mpc/h (default {BOX_MPC_H:g}: CosmoFlow's sub-volume)")
    p.add_argument("--plain-zeldovich", action="store_true",
                   help=f"no truncation window (default: k_G = {TZA_KG_OVER_KNL:g} k_nl(z), see the data card)")
    p.add_argument("--seed", default="0", metavar="S", help="seed, a non-negative integer (default 0)")
    p.add_argument("--workers", default="1", metavar="W", help="processes (default 1); the files do not depend on it")
    p.add_argument("-f", "--force", action="store_true", help="replace existing output files")
    args = p.parse_args(argv)
    args.samples = integer("--samples", args.samples)
    args.test_samples = integer("--test-samples", args.test_samples, 0)
    args.seed = integer("--seed", args.seed, 0)
    args.workers = integer("--workers", args.workers)
    args.size = integer("--size", args.size)
    if args.size not in SIZES:
        raise UsageError(f"--size must be a power of two from {SIZES[0]} to {SIZES[-1]} (32, 64, 128), not {args.size}")
    try:
        args.box_size = float(args.box_size)
    except ValueError:
        raise UsageError(f"--box-size must be a number, not '{args.box_size}'") from None
    if not (np.isfinite(args.box_size) and args.box_size > 0):
        raise UsageError(f"--box-size must be positive, not {args.box_size}")
    args.tza = None if args.plain_zeldovich else TZA_KG_OVER_KNL
    return args


def check_out(args):
    """Refuses before any work: an existing output without --force, or a path component that is not
    a folder."""
    head = args.out
    while head and not os.path.exists(head):
        head = os.path.dirname(head)
    if head and not os.path.isdir(head):
        raise OSError(f"'{head}' exists and is not a folder")
    if os.path.isdir(args.out) and not args.force:
        for f in outputs():
            if os.path.exists(os.path.join(args.out, f)):
                raise UsageError(f"'{os.path.join(args.out, f)}' exists (--force replaces it)")


def main(argv):
    args = parse(argv)
    check_out(args)
    created = not os.path.isdir(args.out)
    os.makedirs(args.out, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp_paths, ok = [], False
    try:
        report = generate(args, tmp_paths)
        ok = True
    finally:
        for path in tmp_paths:
            if os.path.exists(path):
                os.remove(path)
        if not ok and created and not os.listdir(args.out):
            os.rmdir(args.out)
    print(f"cosmo_volumes: {args.samples} + {args.test_samples} samples of {args.size}^3 in {report['seconds']:.1f} s: "
          f"{report['cpu_seconds_per_sample']:.4f} CPU s per sample, {report['seconds_per_sample_wall']:.4f} s wall "
          f"({args.workers} worker(s))",
          file=sys.stderr)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except UsageError as e:
        print(f"cosmo_volumes: error: {e}\nusage: cosmo_volumes.py --out DIR [options] (--help for more)", file=sys.stderr)
        sys.exit(1)
    except OSError as e:
        print(f"cosmo_volumes: error: {e}", file=sys.stderr)
        sys.exit(3)
    except KeyboardInterrupt:
        print("cosmo_volumes: interrupted; nothing written", file=sys.stderr)
        sys.exit(130)
