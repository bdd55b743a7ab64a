#!/usr/bin/env python3
"""Writes the .npy fixtures of tests/npy_test.cpp with numpy (run from any
directory; the files go next to this script):

  <dtype>_<shape>.npy     every dtype of npy_fixtures.DTYPES in every shape
                          of npy_fixtures.SHAPES, format version 1.0
  fortran_<dtype>_<shape>.npy   Fortran-order arrays
  v2_float32_2x3x4.npy, v3_int16_2x3x4.npy   format versions 2.0 and 3.0
  bad_bigendian_float32_5.npy, bad_uint16_5.npy, bad_complex64_5.npy,
  bad_structured_5.npy    files numpy writes that syncmem refuses

Written with numpy 1.24 (Debian 12's python3-numpy).
"""

import os

import numpy as np

from npy_fixtures import DTYPES, SHAPES, array

HERE = os.path.dirname(os.path.abspath(__file__))


def save(name, a, version=None):
    with open(os.path.join(HERE, name), "wb") as f:
        np.lib.format.write_array(f, a, version=version, allow_pickle=False)


def main():
    for dtype in DTYPES:
        for shape_name, shape in SHAPES.items():
            save(f"{dtype}_{shape_name}.npy", array(dtype, shape), version=(1, 0))
    save("fortran_float64_2x3x4.npy", np.asfortranarray(array("float64", (2, 3, 4))), version=(1, 0))
    save("fortran_int16_3x4.npy", np.asfortranarray(array("int16", (3, 4))), version=(1, 0))
    save("v2_float32_2x3x4.npy", array("float32", (2, 3, 4)), version=(2, 0))
    save("v3_int16_2x3x4.npy", array("int16", (2, 3, 4)), version=(3, 0))
    save("bad_bigendian_float32_5.npy", array("float32", (5,)).astype(">f4"), version=(1, 0))
    save("bad_uint16_5.npy", np.arange(5, dtype="<u2"), version=(1, 0))
    save("bad_complex64_5.npy", np.arange(5, dtype="<c8"), version=(1, 0))
    save("bad_structured_5.npy", np.zeros(5, dtype=[("a", "<i4"), ("b", "<f4")]), version=(1, 0))


if __name__ == "__main__":
    main()
