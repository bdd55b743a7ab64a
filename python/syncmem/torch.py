"""syncmem's caching allocator as PyTorch's CUDA allocator.

    import torch
    import syncmem.torch
    syncmem.torch.enable()         # before the first CUDA tensor

PyTorch's CUDA tensors then take their memory from syncmem's caching resource
of their device (the one syncmem's own objects use), allocated for PyTorch's
current stream and freed on it. Under PyTorch that resource grows one
virtual range and moves idle pages to where it grows (expandable:1,
grow_from_idle:1), which keeps what is reserved close to what the loop needs
at its peak; SYNCMEM_ALLOC_CONF changes the keys it names (e.g.
SYNCMEM_ALLOC_CONF=expandable:0 for plain segments). Tensor.record_stream,
torch.cuda.empty_cache, torch.cuda.memory_stats (memory_allocated,
memory_reserved, max_memory_allocated, reset_peak_memory_stats...) and
torch.cuda.memory_snapshot answer from syncmem; save_snapshot() writes the
snapshot `syncmem view` draws. torch.cuda.graph allocates from syncmem's
graph pools, torch.cuda.MemPool, CUDA IPC (torch.multiprocessing), memory
history and CUDA graph trees (torch.compile(mode="reduce-overhead")) work on
syncmem's allocator. What it does not offer yet (docs/python.md lists it)
raises NotImplementedError naming the feature.
"""

from __future__ import annotations

import warnings

from . import _syncmem


def _native():
    import torch  # noqa: F401  (loads libc10 and libc10_cuda, which syncmem._torch links)

    if not _syncmem.built_with_cuda:
        raise _syncmem.UnsupportedError(
            "syncmem.torch: this syncmem was built without the CUDA backend "
            "(pip install it where the CUDA toolkit is found)"
        )
    try:
        from . import _torch
    except ImportError as e:
        raise _syncmem.UnsupportedError(
            "syncmem.torch: this syncmem was built without its PyTorch allocator (syncmem._torch): "
            "build it with `pip install --no-build-isolation .` where torch with CUDA is importable, "
            f"against the same torch ({e})"
        ) from e
    return _torch


def enable() -> None:
    """Makes syncmem's caching allocator PyTorch's CUDA allocator, for good.

    Call it before CUDA is used in the process (before the first CUDA tensor,
    torch.cuda.init() or anything that initializes CUDA through PyTorch):
    afterwards PyTorch's own allocator holds memory that only it can free, and
    enable() raises syncmem.LogicError saying so. Calling it again is harmless.

    It also makes expandable:1,grow_from_idle:1 the options (below
    SYNCMEM_ALLOC_CONF's) of syncmem's per-device resources made from now on.
    A device syncmem allocated on before keeps the options its resource was
    made with, and enable() warns (RuntimeWarning) naming it.
    """
    warning = _native().install()
    if warning:
        warnings.warn(warning, RuntimeWarning, stacklevel=2)


def enabled() -> bool:
    """Whether syncmem's allocator is PyTorch's CUDA allocator."""
    try:
        return bool(_native().installed())
    except _syncmem.UnsupportedError:
        return False


def save_snapshot(path: str, device=None) -> None:
    """Writes the segments and blocks of a CUDA device's caching resource
    (syncmem.snapshot/1 JSON) to `path`, for `syncmem view path`.

    device: an int, "cuda:N", a torch.device, or None for PyTorch's current
    device. (torch.cuda.memory_snapshot() returns the same segments in
    PyTorch's form.)
    """
    import torch

    if device is None:
        index = torch.cuda.current_device()
    else:
        d = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
        if d.type != "cuda":
            raise ValueError(f"syncmem.torch.save_snapshot: device {device!r} is not a CUDA device")
        index = d.index if d.index is not None else torch.cuda.current_device()
    _native().save_snapshot(str(path), index)
