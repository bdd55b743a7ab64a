"""Shared fixtures: two emulated devices (so that every test runs without a
GPU), fresh random data, and the GPU's presence for the tests that need one."""

import ctypes
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

import syncmem

# Two emulated devices, enabled before anything counts devices.
syncmem.enable_emulated_devices(count=2, memory_per_device=256 << 20)

EMULATED = "emulated:0"
OTHER_EMULATED = "emulated:1"


def cuda_available() -> bool:
    return syncmem.built_with_cuda and syncmem.device_count("cuda") > 0


needs_cuda = pytest.mark.skipif(not cuda_available(), reason="no CUDA device (or syncmem built without CUDA)")


def run_python(code: str, *args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.update(env or {})
    # An empty folder as the working directory, so that `import syncmem` finds
    # the installed package, never python/syncmem of a source tree.
    with tempfile.TemporaryDirectory() as cwd:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True,
                              text=True, env=full_env, timeout=timeout, cwd=cwd)


def checked(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


@pytest.fixture
def rng():
    seed = int.from_bytes(os.urandom(8), "little")
    print(f"random seed {seed}")
    return np.random.default_rng(seed)


def random_array(rng, shape, dtype):
    """Fresh random values of any dtype: random bytes, reinterpreted (floats
    kept finite so that comparisons by value would work too)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind == "f":
        return rng.standard_normal(size=shape).astype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize
    return np.frombuffer(rng.bytes(n), dtype=dtype).reshape(shape).copy()


# DLPack capsule inspection through the C API, without consuming the capsule.
_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def capsule_name(capsule) -> str:
    return _api.PyCapsule_GetName(capsule).decode()


def versioned_flags(capsule) -> int:
    """DLManagedTensorVersioned::flags: after version (8 bytes), manager_ctx and deleter."""
    p = _api.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    return ctypes.c_uint64.from_address(p + 24).value


def versioned_version(capsule) -> tuple:
    p = _api.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    return (ctypes.c_uint32.from_address(p).value, ctypes.c_uint32.from_address(p + 4).value)
