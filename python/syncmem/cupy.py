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

from . import _syncmem

_previous = None


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
    cupy.cuda.set_allocator(_malloc)
    if pinned:
        cupy.cuda.set_pinned_memory_allocator(_pinned_malloc)


def disable() -> None:
    """Gives CuPy its default pools back (blocks already handed out stay syncmem's until freed)."""
    import cupy

    cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
    cupy.cuda.set_pinned_memory_allocator(cupy.get_default_pinned_memory_pool().malloc)
