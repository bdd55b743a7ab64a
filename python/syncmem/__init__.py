"""syncmem: host/device memory that synchronises itself, from Python.

The Python half of the C++ library (libsyncmem, shipped inside this package):

    import syncmem
    t = syncmem.tensor((2, 3), "float32", "cuda:0")
    a = t.numpy(writable=True)           # the host side, zero-copy
    x = torch.from_dlpack(t)             # the device side, zero-copy
    u = syncmem.from_dlpack(x)           # borrows x's memory

Submodules: syncmem.cupy (CuPy's allocators on syncmem's resources),
syncmem.torch (PyTorch's CUDA allocator on syncmem's caching resource).
"""

from __future__ import annotations


def _share_the_cuda_runtime_of_the_wheels() -> None:
    """Loads the CUDA runtime of the nvidia-* wheels, when installed, before libsyncmem.

    PyTorch (and other packages of CUDA wheels) load libcudart from those
    wheels by path. Loaded first, libsyncmem would bring the toolkit's copy,
    and the process would then hold two CUDA runtimes. Loaded here, the
    wheel's copy is the one libsyncmem binds to, as it is when torch is
    imported first.
    """
    import ctypes
    import glob
    import os
    import sys

    if not sys.platform.startswith("linux"):
        return
    for base in sys.path:
        if not base or not os.path.isdir(os.path.join(base, "nvidia")):
            continue
        for folder in ("cuda_runtime", "cu13", "cu12"):  # PyTorch's order of search
            for path in sorted(glob.glob(os.path.join(base, "nvidia", folder, "lib", "libcudart.so.*[0-9]"))):
                try:
                    ctypes.CDLL(path)
                except OSError:
                    continue
                return


_share_the_cuda_runtime_of_the_wheels()

from . import _syncmem  # noqa: E402
from ._syncmem import (  # noqa: F401, E402  (the public API)
    CudaError,
    DeviceError,
    Error,
    LogicError,
    OutOfMemoryError,
    SystemCallError,
    UnsupportedError,
    allocate_device,
    allocate_pinned,
    allocation,
    built_with_cuda,
    current_device,
    device,
    device_count,
    device_kind,
    devices,
    empty_cache,
    enable_emulated_devices,
    from_dlpack,
    memory_stats,
    set_current_device,
    stream,
    sync_state,
    synced_memory,
    synchronize,
    tensor,
    why_no_devices,
)

__version__ = _syncmem.__version__


class _host_view:
    """A DLPack producer of a tensor's host side (what tensor.numpy() hands numpy)."""

    __slots__ = ("_tensor", "_read_only")

    def __init__(self, t: tensor, read_only: bool) -> None:
        self._tensor = t
        self._read_only = read_only

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self._tensor.export_dlpack(
            stream=stream,
            max_version=max_version if max_version is not None else (1, 1),
            dl_device=(1, 0),
            copy=copy,
            read_only=self._read_only,
        )


def _numpy(self: tensor, writable: bool = False):
    """The host side as a numpy array sharing its memory (zero-copy), up to date.

    writable=True makes the host side the newest, so that writes through the
    array are what the device sees next; a read-only array leaves the state
    alone. Do not resize the tensor while the array is alive.
    """
    import numpy

    if self.dtype == "bfloat16":
        raise TypeError(
            "syncmem.tensor.numpy: numpy has no bfloat16; read its bits through "
            "syncmem.tensor.from_storage(t.storage, t.shape, 'int16', t.storage_offset).numpy()"
        )
    return numpy.from_dlpack(_host_view(self, not writable))


tensor.numpy = _numpy
tensor.__array__ = lambda self, dtype=None, copy=None: (
    _numpy(self) if dtype is None else _numpy(self).astype(dtype)
)


def __getattr__(name: str):
    # Submodules that import third-party packages load on first use.
    if name in ("cupy", "torch"):
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'syncmem' has no attribute {name!r}")


def _rebuild_shared_tensor(handle: bytes, shape: tuple, dtype: str, offset: int) -> tensor:
    return _syncmem._ipc_import_tensor(handle, shape, dtype, offset)


def _reduce_shared_tensor(t: tensor):
    """Sends a tensor to another process as a handle to its storage (CUDA IPC).

    The receiver maps the same device memory, zero-copy, once; this process
    holds the storage until the receiver lets go of it or exits (see
    syncmem.ipc_collect). Only the device side is shared.
    """
    handle = _syncmem._ipc_export_tensor(t)
    return (_rebuild_shared_tensor, (handle, t.shape, t.dtype, t.storage_offset))


def _register_with_multiprocessing() -> None:
    # As torch.multiprocessing does: multiprocessing's own pickler shares,
    # plain pickle is left alone.
    from multiprocessing.reduction import ForkingPickler

    ForkingPickler.register(tensor, _reduce_shared_tensor)


_register_with_multiprocessing()
ipc_collect = _syncmem.ipc_collect
ipc_exports_held = _syncmem.ipc_exports_held
