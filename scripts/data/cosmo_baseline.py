#!/usr/bin/env python3
"""The summary-statistic baseline of the cosmology volumes (scripts/data/cosmo_volumes.py): ordinary
least squares from the per-channel mean and variance of log1p(counts) (8 features and an intercept,
numpy lstsq) to the four targets, fitted on DIR's training set and evaluated on its test set.
A CNN trained on the same files should beat it (the goal: overall MAE <= 0.85 x the baseline's).

stdout, JSON: the train and test sample counts, the features, the coefficients, and on the test
set mse and mae (over all targets), mae_per_target and correlation (Pearson r of prediction and
target) in the order of "targets" (Omega_m, sigma_8, n_s, h), and mae_constant (the training mean
predicted for every sample) for scale. Exit codes: 0, 1 bad flags, 2 a missing or malformed data set.

Usage: cosmo_baseline.py DIR [--chunk 256]
"""
import argparse
import json
import os
import sys

import numpy as np

TARGETS = ("Omega_m", "sigma_8", "n_s", "h")


class InputError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"cosmo_baseline: error: {message}\nusage: cosmo_baseline.py DIR [--chunk N] (--help for more)", file=sys.stderr)
        sys.exit(1)


def features(volumes, chunk=256):
    """[N, 2C] float64: per channel, the mean then the variance of log1p(counts) over the voxels
    (order mean_0, var_0, mean_1, var_1, ...). volumes: [N, C, D, H, W], read `chunk` samples at a time."""
    n, c = volumes.shape[:2]
    out = np.zeros((n, 2 * c))
    for i in range(0, n, chunk):
        x = np.log1p(np.asarray(volumes[i:i + chunk], dtype=np.float64)).reshape(min(chunk, n - i), c, -1)
        out[i:i + chunk, 0::2] = x.mean(axis=2)
        out[i:i + chunk, 1::2] = x.var(axis=2)
    return out


def design(f):
    return np.hstack([np.ones((len(f), 1)), f])


def fit(f, y):
    """OLS coefficients [1 + F, T] (intercept first) of y [N, T] on the features f [N, F]."""
    return np.linalg.lstsq(design(f), y, rcond=None)[0]


def predict(coef, f):
    return design(f) @ coef


def pearson(a, b):
    a, b = a - a.mean(axis=0), b - b.mean(axis=0)
    den = np.sqrt((a * a).sum(axis=0) * (b * b).sum(axis=0))
    return np.where(den > 0, (a * b).sum(axis=0) / np.where(den > 0, den, 1), np.nan)


def load(folder, split):
    try:
        vol = np.load(os.path.join(folder, f"{split}_volumes.npy"), mmap_mode="r")
        y = np.load(os.path.join(folder, f"{split}_targets.npy")).astype(np.float64)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read the {split} set of '{folder}': {e}") from None
    if vol.ndim != 5 or y.shape != (len(vol), len(TARGETS)):
        raise InputError(f"'{folder}': {split} volumes {vol.shape} and targets {y.shape} are not [N, C, D, H, W] and [N, 4]")
    return vol, y


def main(argv):
    p = Parser(prog="cosmo_baseline.py", description=__doc__.split("\n\n")[0],
               epilog="\n\n".join(__doc__.split("\n\n")[1:-1]), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", metavar="DIR", help="the --out folder of cosmo_volumes.py")
    p.add_argument("--chunk", type=int, default=256, help="samples read at a time (default 256)")
    args = p.parse_args(argv)
    if args.chunk < 1:
        p.error(f"--chunk must be at least 1, not {args.chunk}")
    vtr, ytr = load(args.dir, "train")
    vte, yte = load(args.dir, "test")
    if len(vte) == 0:
        raise InputError(f"'{args.dir}' has no test samples")
    ftr, fte = features(vtr, args.chunk), features(vte, args.chunk)
    coef = fit(ftr, ytr)
    err = predict(coef, fte) - yte
    c = vtr.shape[1]
    report = {
        "dir": args.dir, "train": len(vtr), "test": len(vte), "targets": list(TARGETS),
        "features": ["intercept"] + [f"{s}_log1p_ch{i}" for i in range(c) for s in ("mean", "var")],
        "coefficients": {t: coef[:, j].round(6).tolist() for j, t in enumerate(TARGETS)},
        "mse": float(np.mean(err ** 2)), "mae": float(np.mean(np.abs(err))),
        "mae_per_target": np.mean(np.abs(err), axis=0).tolist(),
        "correlation": pearson(predict(coef, fte), yte).tolist(),
        "mae_constant": float(np.mean(np.abs(yte - ytr.mean(axis=0)))),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except InputError as e:
        print(f"cosmo_baseline: error: {e}", file=sys.stderr)
        sys.exit(2)
