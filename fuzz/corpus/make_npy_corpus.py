#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/npy_fuzzer.cpp into fuzz/corpus/npy/: a few
of the numpy-written fixtures of tests/data/npy (valid, and refused), and
hand-made files for the parser's edge cases. Standard library only."""

import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "npy")
FIXTURES = os.path.join(HERE, "..", "..", "tests", "data", "npy")

COPIED = [
    "float32_2x3x4.npy", "bool_5.npy", "int64_scalar.npy", "float64_empty.npy", "uint8_3x0x2.npy",
    "float16_5.npy", "int8_2x3x4.npy", "fortran_int16_3x4.npy", "fortran_float64_2x3x4.npy",
    "v2_float32_2x3x4.npy", "v3_int16_2x3x4.npy", "bad_bigendian_float32_5.npy", "bad_structured_5.npy",
]


def npy(dictionary, data=b"", major=1, length=None):
    prefix = 10 if major == 1 else 12
    header = dictionary.encode("latin1")
    header += b" " * (64 - (prefix + len(header) + 1) % 64) + b"\n"
    size = len(header) if length is None else length
    packed = struct.pack("<H" if major == 1 else "<I", size)
    return b"\x93NUMPY" + bytes([major, 0]) + packed + header + data


MADE = {
    "made_py2_long.npy": npy("{'descr': '<i2', 'fortran_order': False, 'shape': (3L, 2L), }", bytes(12)),
    "made_double_quotes.npy": npy('{"descr":"<f4","fortran_order":False,"shape":(2,)}', bytes(8)),
    "made_bool_bytes.npy": npy("{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }", b"\x00\x02\xff\x01"),
    "made_fortran_3d.npy": npy("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 2, 3), }", bytes(range(48))),
    "made_32_axes.npy": npy("{'descr': '|u1', 'fortran_order': False, 'shape': (" + "1, " * 32 + "), }", b"\x07"),
    "bad_33_axes.npy": npy("{'descr': '|u1', 'fortran_order': False, 'shape': (" + "1, " * 33 + "), }", b"\x07"),
    "bad_negative.npy": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"),
    "bad_huge.npy": npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4), }"),
    "bad_truncated_data.npy": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000,), }", bytes(10)),
    "bad_header_length.npy": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", bytes(4), 2,
                                 0x7FFFFFFF),
    "bad_magic.npy": b"\x93NUMPX\x01\x00" + bytes(8),
    "bad_version.npy": b"\x93NUMPY\x04\x00" + bytes(8),
    "bad_not_tuple.npy": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", bytes(8)),
    "bad_unknown_dtype.npy": npy("{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }", bytes(16)),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in COPIED:
        shutil.copyfile(os.path.join(FIXTURES, name), os.path.join(OUT, name))
    for name, content in MADE.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(content)


if __name__ == "__main__":
    main()
