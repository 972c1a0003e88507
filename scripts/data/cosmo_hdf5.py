#!/usr/bin/env python3
"""Converts CosmoFlow HDF5 universes (MLPerf HPC, one simulated universe per file) into the
toolkit's layout: each cube is cut into (E/S)^3 sub-volumes of S^3 voxels, channels first, and every
sub-volume gets its file's targets.

Input (as mlcommons/hpc cosmoflow/prepare.py reads it, `f['full'][:]` and `f['unitPar'][:]`):
  full      integer counts [E, E, E, C] (X, Y, Z, channel last; 512^3 x 4 in the real data, int16:
            the reference writes the cut bytes as they are and decodes them as int16)
  unitPar   the K cosmological parameters [K] (4 in the real data), already scaled: used as they are

Sub-volumes: n = E / S per axis, sub-volume i = (a n + b) n + c holds
full[a S:(a+1) S, b S:(b+1) S, c S:(c+1) S, :] transposed to [C, S, S, S] (the reference's
np.split order along axes 0, 1, 2; D, H, W = X, Y, Z). Files are taken in the order given (a folder:
its *.hdf5 / *.h5 files, recursively, sorted), so file j holds samples j n^3 .. (j + 1) n^3 - 1.

Files in --out (each written to a temporary name beside it and renamed when all are complete):
  <prefix>_volumes.npy      int16   [N, C, S, S, S]   (layout N, C, D, H, W), N = files x n^3
  <prefix>_targets.npy      float32 [N, K]            unitPar of the sample's file
  <prefix>_cosmo_hdf5.json  the source files (with their sample ranges), S, E, C, K and the layout

Every input is checked before anything is written (datasets present, ranks, an integer counts
dtype, the same E, C and K in all files, S dividing E, finite unitPar); counts outside int16 and
unreadable data are found while copying. Any error names the file and the dataset, exits with status 1
and leaves no output (nor a temporary file). One slab of S x E x E x C counts is in memory at a time
(256 MiB at S = 128, E = 512, C = 4, int16). stdout: a JSON report. The data card:
docs/data/cosmo-volumes.md.

Usage: cosmo_hdf5.py --out DIR [--prefix train] [--size 128] [--force] FILE_OR_DIR...
"""
import argparse
import json
import os
import signal
import sys
import time

import numpy as np

CONVERTER = "hpcnn scripts/data/cosmo_hdf5.py"
CONVERTER_VERSION = 1
COUNTS, TARGETS = "full", "unitPar"
INT16 = np.iinfo(np.int16)
SUFFIXES = (".hdf5", ".h5")


class UsageError(Exception):
    pass


class InputError(Exception):
    """Bad input data: the message names the file and the dataset."""


# ---- inputs --------------------------------------------------------------------------------------
def expand(paths):
    """The input files: files as given, folders as their *.hdf5 / *.h5 files (recursive, sorted)."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(SUFFIXES))
            if not found:
                raise UsageError(f"'{path}' holds no *.hdf5 or *.h5 file")
            files.extend(found)
        elif os.path.exists(path):
            files.append(path)
        else:
            raise UsageError(f"'{path}' does not exist")
    return files


def open_h5(path):
    import h5py
    if os.path.getsize(path) == 0:
        raise InputError(f"{path}: empty file (0 bytes), not HDF5")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise InputError(f"{path}: cannot open as HDF5 (truncated or corrupt?): {e}") from None


def dataset(f, path, name):
    import h5py
    try:
        obj = f[name]
    except KeyError:
        raise InputError(f"{path}: no dataset '{name}' (has: {', '.join(sorted(f.keys())) or 'nothing'})") from None
    except Exception as e:  # a damaged object header
        raise InputError(f"{path}: dataset '{name}' unreadable: {e}") from None
    if not isinstance(obj, h5py.Dataset):
        raise InputError(f"{path}: '{name}' is a {type(obj).__name__}, not a dataset")
    return obj


def read_targets(path, ds):
    if ds.ndim != 1 or ds.shape[0] < 1:
        raise InputError(f"{path}: dataset '{TARGETS}' has shape {ds.shape}, expected [K] (K >= 1, 4 in CosmoFlow)")
    if not (np.issubdtype(ds.dtype, np.floating) or np.issubdtype(ds.dtype, np.integer)):
        raise InputError(f"{path}: dataset '{TARGETS}' has dtype {ds.dtype}, expected a number type")
    try:
        y = ds[()]
    except Exception as e:
        raise InputError(f"{path}: dataset '{TARGETS}' unreadable (truncated or corrupt?): {e}") from None
    y32 = np.asarray(y).astype(np.float32)
    bad = ~np.isfinite(y32)
    if bad.any():
        raise InputError(f"{path}: dataset '{TARGETS}' holds a value that is not finite in float32 "
                         f"({y[np.argmax(bad)]} at index {int(np.argmax(bad))})")
    return y32


def inspect(path):
    """(edge E, channels C, targets float32 [K]) of one file, checked; reads unitPar only."""
    with open_h5(path) as f:
        full = dataset(f, path, COUNTS)
        shape = tuple(full.shape)
        if len(shape) != 4:
            raise InputError(f"{path}: dataset '{COUNTS}' has rank {len(shape)} {shape}, expected 4: [X, Y, Z, channels]")
        if not (shape[0] == shape[1] == shape[2]) or shape[0] < 1 or shape[3] < 1:
            raise InputError(f"{path}: dataset '{COUNTS}' has shape {shape}, expected a cube [E, E, E, channels]")
        if not np.issubdtype(full.dtype, np.integer):
            raise InputError(f"{path}: dataset '{COUNTS}' has dtype {full.dtype}, expected integer counts (int16)")
        targets = read_targets(path, dataset(f, path, TARGETS))
        return shape[0], shape[3], targets


def check_inputs(files, size):
    """Per file (edge, channels, targets); all files must agree and `size` must divide the edge."""
    info = [inspect(p) for p in files]
    edge, channels, k = info[0][0], info[0][1], info[0][2].size
    for path, (e, c, t) in zip(files, info):
        if (e, c) != (edge, channels):
            raise InputError(f"{path}: dataset '{COUNTS}' is {e}^3 x {c}, but {files[0]} is {edge}^3 x {channels}")
        if t.size != k:
            raise InputError(f"{path}: dataset '{TARGETS}' has {t.size} values, but {files[0]} has {k}")
    if edge % size:
        divisors = [d for d in range(1, edge + 1) if edge % d == 0]
        raise UsageError(f"--size {size} does not divide the cube edge {edge} of dataset '{COUNTS}' in {files[0]} "
                         f"(divisors: {', '.join(map(str, divisors))})")
    return edge, channels, k, [t for _, _, t in info]


# ---- conversion ----------------------------------------------------------------------------------
def to_int16(slab, path, x0):
    """The slab as int16, refusing a count outside int16 (and negative counts are kept: the dtype
    is signed in the reference too)."""
    if slab.dtype == np.int16:
        return slab
    lo, hi = slab.min(), slab.max()
    if lo < INT16.min or hi > INT16.max:
        bad = lo if lo < INT16.min else hi
        where = np.unravel_index(int(np.argmax(slab == bad)), slab.shape)
        raise InputError(f"{path}: dataset '{COUNTS}' holds {int(bad)} at [{x0 + int(where[0])}, "
                         f"{', '.join(str(int(w)) for w in where[1:])}], outside int16 [{INT16.min}, {INT16.max}]")
    return slab.astype(np.int16)


def copy_file(path, volumes, first, size, edge):
    """Writes the (edge/size)^3 sub-volumes of one file into volumes[first:], one slab at a time."""
    n = edge // size
    with open_h5(path) as f:
        full = dataset(f, path, COUNTS)
        for a in range(n):
            try:
                slab = full[a * size:(a + 1) * size]
            except Exception as e:
                raise InputError(f"{path}: dataset '{COUNTS}' unreadable at X {a * size}..{(a + 1) * size - 1} "
                                 f"(truncated or corrupt?): {e}") from None
            slab = to_int16(slab, path, a * size)
            for b in range(n):
                for c in range(n):
                    cube = slab[:, b * size:(b + 1) * size, c * size:(c + 1) * size, :]
                    volumes[first + (a * n + b) * n + c] = np.moveaxis(cube, 3, 0)


def file_names(prefix):
    return {"volumes": f"{prefix}_volumes.npy", "targets": f"{prefix}_targets.npy", "card": f"{prefix}_cosmo_hdf5.json"}


def fsync_replace(tmp, final):
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)


def convert(args, files, tmp_paths):
    import h5py
    t0 = time.perf_counter()
    edge, channels, k, targets = check_inputs(files, args.size)
    n3 = (edge // args.size) ** 3
    total = n3 * len(files)
    names = file_names(args.prefix)
    tmp = {key: os.path.join(args.out, f".tmp{os.getpid()}.{name}") for key, name in names.items()}
    tmp_paths.extend(tmp.values())
    volumes = np.lib.format.open_memmap(tmp["volumes"], mode="w+", dtype=np.int16,
                                        shape=(total, channels, args.size, args.size, args.size))
    sources = []
    for j, path in enumerate(files):
        copy_file(path, volumes, j * n3, args.size, edge)
        volumes.flush()
        sources.append({"file": os.path.abspath(path), "samples": [j * n3, (j + 1) * n3],
                        TARGETS: [float(v) for v in targets[j]]})
        print(f"cosmo_hdf5: {path}: {n3} sub-volumes ({j + 1}/{len(files)})", file=sys.stderr)
    del volumes
    with open(tmp["targets"], "wb") as f:
        np.save(f, np.repeat(np.stack(targets), n3, axis=0).astype(np.float32))
    card = {
        "converter": CONVERTER, "version": CONVERTER_VERSION, "h5py": h5py.__version__,
        "reference": "mlcommons/hpc cosmoflow/prepare.py (split_universe: np.split along axes 0, 1, 2)",
        "input": {"counts": f"'{COUNTS}' [E, E, E, C] integer (X, Y, Z, channel)", "targets": f"'{TARGETS}' [K]",
                  "edge": edge, "channels": channels, "targets": k},
        "size": args.size, "per_file": n3, "samples": total,
        "order": "sample = file_index * n^3 + (a * n + b) * n + c, n = edge / size; "
                 "counts[a*S:(a+1)*S, b*S:(b+1)*S, c*S:(c+1)*S, :] moved to channels first",
        "layout": f"volumes [N, C, D, H, W] int16 (D, H, W = X, Y, Z); targets [N, {k}] float32 = {TARGETS} of the file",
        "files": {key: names[key] for key in ("volumes", "targets")}, "sources": sources,
    }
    with open(tmp["card"], "w") as f:
        f.write(json.dumps(card, indent=1) + "\n")
    for key, name in names.items():
        fsync_replace(tmp[key], os.path.join(args.out, name))
    tmp_paths.clear()
    return {
        "out": args.out, "prefix": args.prefix, "files": len(files), "edge": edge, "channels": channels,
        "targets": k, "size": args.size, "samples": total, "seconds": round(time.perf_counter() - t0, 3),
        "bytes": sum(os.path.getsize(os.path.join(args.out, name)) for name in names.values()),
    }


# ---- command line --------------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def parse(argv):
    doc = __doc__.split("\n\n")
    p = Parser(prog="cosmo_hdf5.py", description=doc[0], epilog="\n\n".join(doc[1:-1]),
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="FILE_OR_DIR", help="HDF5 universes, or folders of them")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    p.add_argument("--prefix", default="train", help="output name prefix, e.g. train, test (default train)")
    p.add_argument("--size", default="128", metavar="S",
                   help="sub-volume edge in voxels, must divide the cube edge (default 128: CosmoFlow's)")
    p.add_argument("-f", "--force", action="store_true", help="replace existing output files")
    args = p.parse_args(argv)
    try:
        args.size = int(args.size)
    except ValueError:
        raise UsageError(f"--size must be an integer, not '{args.size}'") from None
    if args.size < 1:
        raise UsageError(f"--size must be at least 1, not {args.size}")
    if not args.prefix or os.sep in args.prefix or args.prefix.startswith("."):
        raise UsageError(f"--prefix must be a plain name, not '{args.prefix}'")
    return args


def check_out(args):
    head = args.out
    while head and not os.path.exists(head):
        head = os.path.dirname(head)
    if head and not os.path.isdir(head):
        raise OSError(f"'{head}' exists and is not a folder")
    if os.path.isdir(args.out) and not args.force:
        for name in file_names(args.prefix).values():
            if os.path.exists(os.path.join(args.out, name)):
                raise UsageError(f"'{os.path.join(args.out, name)}' exists (--force replaces it)")


def main(argv):
    args = parse(argv)
    files = expand(args.inputs)
    check_out(args)
    created = not os.path.isdir(args.out)
    os.makedirs(args.out, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp_paths, ok = [], False
    try:
        report = convert(args, files, tmp_paths)
        ok = True
    finally:
        for path in tmp_paths:
            if os.path.exists(path):
                os.remove(path)
        if not ok and created and not os.listdir(args.out):
            os.rmdir(args.out)
    print(f"cosmo_hdf5: {report['files']} file(s) of {report['edge']}^3 x {report['channels']} -> "
          f"{report['samples']} sub-volumes of {args.size}^3 in {report['seconds']:.1f} s", file=sys.stderr)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except UsageError as e:
        print(f"cosmo_hdf5: error: {e}\nusage: cosmo_hdf5.py --out DIR [options] FILE_OR_DIR... (--help for more)",
              file=sys.stderr)
        sys.exit(1)
    except InputError as e:
        print(f"cosmo_hdf5: error: {e}; nothing written", file=sys.stderr)
        sys.exit(1)
    except OSError as e:
        print(f"cosmo_hdf5: error: {e}", file=sys.stderr)
        sys.exit(3)
    except KeyboardInterrupt:
        print("cosmo_hdf5: interrupted; nothing written", file=sys.stderr)
        sys.exit(130)
