"""What the .npy fixtures hold, shared by generate.py (which writes them with
numpy) and check_written.py (which has numpy read the files syncmem wrote).
tests/npy_test.cpp computes the same values in C++.

Element i (flat index in C order) of each dtype is value(dtype, i); every
value is exact in its dtype, so files compare bit for bit.
"""

import numpy as np

# dtype name (syncmem's and numpy's) -> numpy dtype, little-endian
DTYPES = {
    "bool": np.dtype("|b1"),
    "int8": np.dtype("|i1"),
    "uint8": np.dtype("|u1"),
    "int16": np.dtype("<i2"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
    "float16": np.dtype("<f2"),
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
}

# shape name -> shape
SHAPES = {
    "scalar": (),
    "empty": (0,),
    "5": (5,),
    "2x3x4": (2, 3, 4),
    "3x0x2": (3, 0, 2),
}


def value(dtype, i):
    if dtype == "bool":
        return i % 3 == 0
    if dtype == "int8":
        return i * 5 - 60
    if dtype == "uint8":
        return i * 10 + 3
    if dtype == "int16":
        return i * 1000 - 12000
    if dtype == "int32":
        return i * 100000 - 1000000
    if dtype == "int64":
        return i * 10000000000 - (1 << 40)
    if dtype == "float16":
        return i * 0.25 - 2.0
    if dtype == "float32":
        return i * 0.5 - 3.25
    if dtype == "float64":
        return float(i) * 0.1 - 1.0
    raise ValueError(dtype)


def array(dtype, shape):
    count = int(np.prod(shape, dtype=np.int64))
    flat = np.array([value(dtype, i) for i in range(count)], dtype=DTYPES[dtype])
    return flat.reshape(shape)
