"""CuPy's allocators on syncmem's resources.

    import syncmem.cupy
    syncmem.cupy.enable()          # before CuPy allocates

Device memory then comes from the device's syncmem resource (the caching
resource unless replaced), allocated for CuPy's current stream and given back
on it when CuPy drops the block, as CuPy's own pool does; pinned host memory
comes from syncmem's caching pinned resource. syncmem.memory_stats() shows
what CuPy holds.
"""

from __future__ import annotations

import atexit

from . import _syncmem

_previous = None
_exit_hook_registered = False


def _release_cupy_watch_list() -> None:
    """At exit: lets CuPy drop the pinned blocks it holds for copies in flight.

    cupy.asarray of pinned host memory keeps the memory alive until its copy's
    event completes, and lets go only on its next pinned allocation; blocks
    still held when the interpreter ends would outlive syncmem's bindings.
    """
    try:
        import cupy

        cupy.cuda.runtime.deviceSynchronize()
        cupy.cuda.alloc_pinned_memory(0)  # releases the completed copies' blocks
    except Exception:  # noqa: BLE001 -- the process is ending: nothing to report to
        pass


def _malloc(size: int):
    import cupy

    device = cupy.cuda.runtime.getDevice()
    stream = cupy.cuda.get_current_stream().ptr
    block = _syncmem.allocate_device(size, f"cuda:{device}", stream)
    memory = cupy.cuda.UnownedMemory(block.ptr, size, block, device)
    return cupy.cuda.MemoryPointer(memory, 0)


class _pinned_block:
    """What CuPy's PinnedMemoryPointer reads (ptr, size), owning the allocation."""

    __slots__ = ("allocation", "ptr", "size")

    def __init__(self, block) -> None:
        self.allocation = block
        self.ptr = block.ptr
        self.size = block.size


def _pinned_malloc(size: int):
    import cupy

    device = cupy.cuda.runtime.getDevice()
    stream = cupy.cuda.get_current_stream().ptr
    block = _syncmem.allocate_pinned(size, f"cuda:{device}", stream)
    return cupy.cuda.PinnedMemoryPointer(_pinned_block(block), 0)


def enable(pinned: bool = True) -> None:
    """Makes syncmem CuPy's device allocator (and pinned allocator, unless pinned=False)."""
    import cupy

    if not _syncmem.built_with_cuda:
        raise _syncmem.UnsupportedError(
            "syncmem.cupy.enable: this syncmem was built without the CUDA backend "
            "(pip install it where the CUDA toolkit is found)"
        )
    global _exit_hook_registered
    cupy.cuda.set_allocator(_malloc)
    if pinned:
        cupy.cuda.set_pinned_memory_allocator(_pinned_malloc)
        if not _exit_hook_registered:
            atexit.register(_release_cupy_watch_list)
            _exit_hook_registered = True


def disable() -> None:
    """Gives CuPy its default pools back (blocks already handed out stay syncmem's until freed)."""
    import cupy

    cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
    cupy.cuda.set_pinned_memory_allocator(cupy.get_default_pinned_memory_pool().malloc)
