"""The installed package: what `pip install .` puts beside the Python code."""

import pathlib
import struct

import syncmem

PACKAGE = pathlib.Path(syncmem.__file__).parent


def section_names(path: pathlib.Path) -> set[str]:
    """The names of an ELF64 little-endian file's sections."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, f"{path.name} is not a 64-bit little-endian ELF"
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, int]:  # the name's offset, and the section's offset in the file
        at = shoff + i * shentsize
        return struct.unpack_from("<I", data, at)[0], struct.unpack_from("<Q", data, at + 0x18)[0]

    strings = header(shstrndx)[1]
    names = set()
    for i in range(shnum):
        start = strings + header(i)[0]
        names.add(data[start:data.index(b"\0", start)].decode())
    return names


def test_the_libraries_keep_their_symbol_tables():
    # A stack through syncmem (PyTorch's memory history, a debugger, a
    # profiler) names syncmem's internal functions only from .symtab; with the
    # exported symbols alone, each is named after the exported one before it.
    libraries = sorted(PACKAGE.glob("*.so"))
    assert any(p.name == "libsyncmem.so" for p in libraries), f"no libsyncmem.so in {PACKAGE}"
    for library in libraries:
        names = section_names(library)
        assert ".dynsym" in names, f"{library.name}: not a shared library? sections {sorted(names)}"
        assert ".symtab" in names, f"{library.name} is stripped"
