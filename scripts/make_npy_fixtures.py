#!/usr/bin/env python3
"""Writes the small .npy files of tests/data/npy/ (read by tests/nn_data/test_npy.cpp).

Run with any Python that has numpy, e.g. .venv/bin/python scripts/make_npy_fixtures.py.
Files are written by numpy itself (np.save / np.lib.format.write_array), so the tests read
real headers (padding, version fields) rather than hand-made ones. Values are deterministic.
"""
import os
import sys

import numpy as np
from numpy.lib import format as npf

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "npy")


def write(name, arr, version=None):
    path = os.path.join(OUT, name)
    with open(path, "wb") as f:
        npf.write_array(f, arr, version=version, allow_pickle=False)
    back = np.load(path)
    assert back.dtype == arr.dtype and back.shape == arr.shape and np.array_equal(back, arr), name


def main():
    os.makedirs(OUT, exist_ok=True)
    f4 = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 11.5) * np.float32(0.25)
    write("f4_2x3x4_v1.npy", f4)                                      # '<f4', version 1.0
    write("f4_2x3x4_v2.npy", f4, version=(2, 0))                      # 4-byte header length
    write("f4_2x3x4_v3.npy", f4, version=(3, 0))                      # utf-8 header
    write("f8_3x2.npy", np.array([[1.0, -2.5], [1e-40, 3.0e38], [np.pi, -0.0]], dtype=np.float64))
    write("f4_scalar.npy", np.array(7.5, dtype=np.float32))          # shape ()
    write("f4_0x3.npy", np.zeros((0, 3), dtype=np.float32))           # zero dim, no data bytes
    write("u1_labels.npy", np.array([0, 9, 3, 255], dtype=np.uint8))  # '|u1'
    write("i4_labels.npy", np.array([1, 0, 7, 2, 5], dtype=np.int32))
    write("i8_labels.npy", np.array([3, 1, 4, 1, 5, 9], dtype=np.int64))
    write("i8_too_big.npy", np.array([1, 2**40], dtype=np.int64))     # does not fit int32
    write("f4_fortran.npy", np.asfortranarray(f4[0]))                 # fortran_order True
    write("f4_big_endian.npy", f4[0].astype(">f4"))                   # '>f4'
    write("f2_2.npy", np.array([1.0, 2.0], dtype=np.float16))         # '<f2' unsupported
    write("structured.npy", np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")]))
    print("wrote", len(os.listdir(OUT)), "files to", os.path.normpath(OUT), "with numpy", np.__version__, file=sys.stderr)


if __name__ == "__main__":
    main()
