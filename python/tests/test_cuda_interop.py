"""On a CUDA device: zero-copy round trips with torch and cupy through DLPack
and __cuda_array_interface__, byte for byte with fresh random data, the
producer's lifetime, streams, and CuPy's allocators on syncmem. Skipped
without a GPU (and each framework's part without the framework)."""

import gc
import weakref

import numpy as np
import pytest
from conftest import checked, needs_cuda, random_array, run_python

import syncmem

pytestmark = needs_cuda
CUDA = "cuda:0"


def released():
    gc.collect()
    syncmem._syncmem._drain_releases()


def test_a_cuda_tensor_describes_its_device_side():
    t = syncmem.tensor((2, 3), "float32", CUDA)
    assert t.__dlpack_device__() == (2, 0)
    cai = t.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (2, 3) and cai["typestr"] == "<f4"
    assert cai["data"] == (t.device_ptr(), False)
    assert cai["stream"] == 1  # the legacy default stream, on which the data is ready
    with pytest.raises(TypeError, match="bfloat16"):
        syncmem.tensor(2, "bfloat16", CUDA).__cuda_array_interface__


def test_numpy_reads_a_cuda_tensor_host_side(rng):
    t = syncmem.tensor((4, 4), "int32", CUDA)
    data = random_array(rng, (4, 4), "int32")
    t.numpy(writable=True)[...] = data
    t.prefetch_to_device()
    t.mark_device_modified()
    a = np.from_dlpack(t, device="cpu")  # dl_device=(1, 0): the host side
    assert a.ctypes.data == t.host_ptr()
    assert a.tobytes() == data.tobytes()
    with pytest.raises(BufferError, match=r"exports to \(2, 0\)"):
        t.__dlpack__(max_version=(1, 1), dl_device=(2, 5))


# ---- torch ---------------------------------------------------------------------------


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"])
def test_torch_reads_and_writes_syncmem_memory(torch, rng, dtype):
    t = syncmem.tensor((33, 17), dtype, CUDA)
    if dtype == "bfloat16":
        data = random_array(rng, (33, 17), "uint16")
        # numpy has no bfloat16: fill its bits through an int16 tensor over the same storage.
        syncmem.tensor.from_storage(t.storage, (33, 17), "int16").numpy(writable=True)[...] = data.view(np.int16)
    else:
        data = random_array(rng, (33, 17), dtype)
        t.numpy(writable=True)[...] = data
    x = torch.from_dlpack(t)
    assert x.device.type == "cuda" and tuple(x.shape) == (33, 17)
    assert x.data_ptr() == t.device_ptr()  # zero-copy
    host = x.cpu()
    got = host.view(torch.int16).numpy().tobytes() if dtype == "bfloat16" else host.numpy().tobytes()
    assert got == data.tobytes()
    # torch writes on its current stream; syncmem's next host read orders after it.
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = torch.from_dlpack(t)
        y.zero_()
    assert t.state == syncmem.sync_state.at_device
    bits = syncmem.tensor.from_storage(t.storage, t.shape, "int16") if dtype == "bfloat16" else t
    assert not bits.numpy().any()


def test_syncmem_borrows_torch_memory_and_keeps_it_alive(torch, rng):
    data = random_array(rng, (64, 64), "float32")
    x = torch.from_numpy(data).cuda()
    address = x.data_ptr()
    watch = weakref.ref(x)
    t = syncmem.from_dlpack(x)
    assert t.device == syncmem.device(CUDA)
    assert t.device_ptr() == address and t.storage.device_borrowed
    assert t.numpy().tobytes() == data.tobytes()
    t.fill(3.0)
    torch.cuda.synchronize()
    t.device_ptr()  # the device side up to date
    syncmem.synchronize(CUDA)
    assert (x.cpu() == 3.0).all()
    del x
    released()
    assert watch() is not None
    del t
    released()
    assert watch() is None


def test_torch_round_trip_is_zero_copy(torch, rng):
    data = random_array(rng, 1 << 16, "uint8")
    x = torch.from_numpy(data).cuda()
    t = syncmem.from_dlpack(x)
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr()
    assert y.cpu().numpy().tobytes() == data.tobytes()


def test_non_contiguous_torch_tensor_is_refused(torch):
    x = torch.zeros(8, 8, device="cuda")
    with pytest.raises(BufferError, match="not contiguous"):
        syncmem.from_dlpack(x.t())


# ---- cupy ----------------------------------------------------------------------------


@pytest.fixture
def cupy():
    return pytest.importorskip("cupy")


def test_cupy_through_cuda_array_interface_and_dlpack(cupy, rng):
    t = syncmem.tensor((40, 25), "float64", CUDA)
    data = random_array(rng, (40, 25), "float64")
    t.numpy(writable=True)[...] = data
    c = cupy.asarray(t)  # __cuda_array_interface__
    assert c.data.ptr == t.device_ptr()
    assert cupy.asnumpy(c).tobytes() == data.tobytes()
    d = cupy.from_dlpack(t)
    assert d.data.ptr == t.device_ptr()
    d *= 2
    cupy.cuda.get_current_stream().synchronize()
    assert t.numpy().tobytes() == (data * 2).tobytes()


def test_syncmem_borrows_cupy_memory(cupy, rng):
    data = random_array(rng, 4096, "int16")
    c = cupy.asarray(data)
    t = syncmem.from_dlpack(c)
    assert t.device_ptr() == c.data.ptr
    assert t.numpy().tobytes() == data.tobytes()


def test_cupy_allocates_from_syncmem(cupy, rng):
    import syncmem.cupy as sc

    sc.enable()
    try:
        before = syncmem.memory_stats(CUDA)["allocations"]
        data = random_array(rng, (256, 256), "float32")
        a = cupy.asarray(data)
        b = (a @ a.T).get()
        assert syncmem.memory_stats(CUDA)["allocations"] > before
        assert np.allclose(b, data @ data.T, rtol=1e-3, atol=1e-2)
        pinned = cupy.cuda.alloc_pinned_memory(1 << 20)
        assert pinned.size() >= 1 << 20
        h = np.frombuffer(pinned, np.uint8, 1 << 20)
        fresh = random_array(rng, 1 << 20, "uint8")
        h[...] = fresh
        assert cupy.asarray(h).get().tobytes() == fresh.tobytes()
        del a, pinned, h
    finally:
        sc.disable()


def test_pinned_blocks_cupy_holds_for_its_copies_are_released_at_exit(cupy):
    # cupy.asarray of pinned memory keeps the block until a later pinned
    # allocation notices the copy completed; at exit none may be left to
    # outlive syncmem's bindings (nanobind would report them leaked).
    result = checked(run_python("""
        import os
        import numpy as np, cupy, syncmem.cupy
        syncmem.cupy.enable()
        fresh = np.frombuffer(os.urandom(1 << 20), np.uint8)
        pinned = cupy.cuda.alloc_pinned_memory(1 << 20)
        h = np.frombuffer(pinned, np.uint8, 1 << 20)
        h[...] = fresh
        assert cupy.asarray(h).get().tobytes() == fresh.tobytes()
        del pinned, h
    """))
    assert "leaked" not in result.stderr, result.stderr
