#!/usr/bin/env python3
"""Has numpy read the .npy files tests/npy_test.cpp wrote with syncmem, and
checks each against npy_fixtures: `check_written.py DIR`. Files are named
<dtype>_<shape>_v<version>.npy. Prints one line per file; exits 1 on any
mismatch.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from npy_fixtures import DTYPES, SHAPES, array  # noqa: E402


def main(directory):
    names = sorted(n for n in os.listdir(directory) if n.endswith(".npy"))
    if not names:
        print("no .npy files in", directory)
        return 1
    failures = 0
    for name in names:
        dtype, shape_name, version = name[: -len(".npy")].rsplit("_", 2)
        path = os.path.join(directory, name)
        with open(path, "rb") as f:
            major, minor = np.lib.format.read_magic(f)
        got = np.load(path, allow_pickle=False)
        want = array(dtype, SHAPES[shape_name])
        ok = (
            f"v{major}" == version
            and minor == 0
            and got.dtype == DTYPES[dtype]
            and got.shape == want.shape
            and got.tobytes() == want.tobytes()
        )
        print(f"{'ok' if ok else 'MISMATCH'} {name}: version {major}.{minor} {got.dtype.str} {got.shape}")
        failures += 0 if ok else 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
