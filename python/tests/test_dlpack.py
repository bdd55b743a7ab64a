"""DLPack both ways and __cuda_array_interface__ on emulated devices (which
export their host side), with numpy as the other party: zero-copy checked
byte for byte, capsule lifetimes, flags, and refused input."""

import gc
import weakref

import numpy as np
import pytest
from conftest import EMULATED, OTHER_EMULATED, capsule_name, random_array, versioned_flags, versioned_version

import syncmem


class producer:
    """A DLPack producer that can be watched with a weakref (numpy arrays cannot)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def released():
    """Waits until syncmem has let go of every borrowed memory it dropped."""
    gc.collect()
    syncmem._syncmem._drain_releases()


# ---- export ------------------------------------------------------------------------


def test_an_emulated_tensor_exports_its_host_side(rng):
    t = syncmem.tensor((3, 5), "float32", EMULATED)
    assert t.__dlpack_device__() == (1, 0)
    data = random_array(rng, (3, 5), "float32")
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.host_ptr()
    a[...] = data  # a writable export: the host side became the newest
    assert t.state == syncmem.sync_state.at_host
    assert t.clone(OTHER_EMULATED).numpy().tobytes() == data.tobytes()


def test_an_emulated_tensor_refuses_a_device_export_by_name():
    t = syncmem.tensor(4, "float32", EMULATED)
    with pytest.raises(BufferError, match="emulated:0 exports its host side only"):
        t.__dlpack__(max_version=(1, 1), dl_device=(2, 0))
    with pytest.raises(AttributeError, match="no __cuda_array_interface__"):
        t.__cuda_array_interface__
    assert not hasattr(t, "__cuda_array_interface__")


def test_capsules_are_versioned_when_asked():
    t = syncmem.tensor(4, "int32", EMULATED)
    assert capsule_name(t.__dlpack__()) == "dltensor"
    versioned = t.__dlpack__(max_version=(1, 1))
    assert capsule_name(versioned) == "dltensor_versioned"
    assert versioned_version(versioned) == (1, 1)
    assert versioned_flags(versioned) == 0
    assert capsule_name(t.__dlpack__(max_version=(0, 8))) == "dltensor"


def test_flags_say_read_only_and_copied(rng):
    t = syncmem.tensor(8, "float64", EMULATED)
    data = random_array(rng, 8, "float64")
    t.numpy(writable=True)[...] = data
    assert versioned_flags(t.export_dlpack(read_only=True)) == 1
    assert versioned_flags(t.__dlpack__(max_version=(1, 0), copy=True)) == 2
    with pytest.raises(BufferError, match="read-only export needs a versioned capsule"):
        t.export_dlpack(read_only=True, max_version=None)
    copied = np.from_dlpack(t, copy=True)
    assert copied.ctypes.data != t.host_ptr()
    assert copied.tobytes() == data.tobytes()


def test_a_capsule_keeps_the_memory_alive(rng):
    t = syncmem.tensor((16, 16), "uint8", EMULATED)
    data = random_array(rng, (16, 16), "uint8")
    t.numpy(writable=True)[...] = data
    capsule = t.__dlpack__(max_version=(1, 1))
    address = t.host_ptr()
    del t
    gc.collect()
    back = syncmem.from_dlpack(capsule, device=EMULATED)  # syncmem reads its own capsule
    assert back.host_ptr() == address
    assert back.numpy().tobytes() == data.tobytes()


def test_an_unconsumed_capsule_gives_the_memory_back():
    syncmem.synchronize(EMULATED)
    live = syncmem.memory_stats(EMULATED)["live_allocations"]
    t = syncmem.tensor(4096, "uint8", EMULATED)
    t.prefetch_to_device()  # the device side exists: a device allocation to watch
    capsule = t.__dlpack__(max_version=(1, 1))
    del t
    gc.collect()
    assert syncmem.memory_stats(EMULATED)["live_allocations"] == live + 1
    del capsule
    gc.collect()
    syncmem.synchronize(EMULATED)
    assert syncmem.memory_stats(EMULATED)["live_allocations"] == live


def test_a_capsule_consumed_twice_is_refused():
    a = np.arange(10, dtype=np.int64)
    capsule = a.__dlpack__(max_version=(1, 0))
    t = syncmem.from_dlpack(capsule, device=EMULATED)
    assert t.numpy().tolist() == list(range(10))
    with pytest.raises(BufferError, match="already consumed"):
        syncmem.from_dlpack(capsule, device=EMULATED)


def test_empty_tensors_cross_both_ways():
    t = syncmem.tensor((0, 3), "float32", EMULATED)
    assert np.from_dlpack(t).shape == (0, 3)
    u = syncmem.from_dlpack(np.zeros((2, 0), np.int16), device=EMULATED)
    assert u.shape == (2, 0) and u.dtype == "int16"


# ---- import ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64"])
def test_from_numpy_borrows_the_host_memory(rng, dtype):
    a = random_array(rng, (6, 9), dtype)
    expected = a.tobytes()
    t = syncmem.from_dlpack(a, device=EMULATED)
    assert t.shape == (6, 9) and t.dtype == dtype
    assert t.host_ptr() == a.ctypes.data  # zero-copy
    assert t.storage.host_borrowed
    assert t.state == syncmem.sync_state.at_host
    t.prefetch_to_device()
    t.synchronize()
    assert t.clone(OTHER_EMULATED).numpy().tobytes() == expected
    # Writes through syncmem land in the producer's memory.
    fresh = random_array(rng, (6, 9), dtype)
    t.numpy(writable=True)[...] = fresh
    assert a.tobytes() == fresh.tobytes()


def test_device_results_come_back_into_the_borrowed_memory(rng):
    a = random_array(rng, 1000, "float32")
    t = syncmem.from_dlpack(a, device=EMULATED)
    src = syncmem.tensor(1000, "float32", OTHER_EMULATED)
    fresh = random_array(rng, 1000, "float32")
    src.numpy(writable=True)[...] = fresh
    src.mark_device_modified()
    t.mark_device_modified()  # the device side is the newest: copy_from writes it
    t.copy_from(src)
    assert t.state == syncmem.sync_state.at_device
    t.numpy()  # brings the host side, which is a's memory, up to date
    assert a.tobytes() == fresh.tobytes()


def test_the_producer_lives_until_syncmem_lets_go(rng):
    p = producer(random_array(rng, 4096, "uint8"))
    watch = weakref.ref(p)
    t = syncmem.from_dlpack(p, device=EMULATED)
    t.prefetch_to_device()  # queued work on the borrowed memory
    del p
    released()
    assert watch() is not None  # the tensor still borrows it
    del t
    released()
    assert watch() is None


def test_read_only_memory_is_copied_or_refused(rng):
    a = random_array(rng, 32, "int32")
    a.flags.writeable = False
    t = syncmem.from_dlpack(a, device=EMULATED)
    assert t.host_ptr() != a.ctypes.data
    assert not t.storage.host_borrowed
    assert t.numpy().tobytes() == a.tobytes()
    with pytest.raises(BufferError, match="read-only and copy=False"):
        syncmem.from_dlpack(a, device=EMULATED, copy=False)


def test_copy_true_copies(rng):
    a = random_array(rng, 32, "int64")
    t = syncmem.from_dlpack(a, device=EMULATED, copy=True)
    assert t.host_ptr() != a.ctypes.data
    assert t.numpy().tobytes() == a.tobytes()


def test_a_wrong_dtype_is_a_type_error_and_leaves_the_capsule_to_its_producer():
    a = np.zeros(4, np.complex64)
    with pytest.raises(TypeError, match="dtype complex64 is not supported"):
        syncmem.from_dlpack(a, device=EMULATED)
    capsule = a.__dlpack__(max_version=(1, 0))
    with pytest.raises(TypeError, match="complex64"):
        syncmem.from_dlpack(capsule, device=EMULATED)
    assert capsule_name(capsule) == "dltensor_versioned"  # not consumed: its destructor frees it


def test_non_contiguous_strides_are_refused_by_name():
    a = np.zeros((4, 6), np.float32)
    with pytest.raises(BufferError, match=r"not contiguous \(strides \(6, 2\)"):
        syncmem.from_dlpack(a[:, ::2], device=EMULATED)
    with pytest.raises(BufferError, match="not contiguous"):
        syncmem.from_dlpack(a.T, device=EMULATED)
    # A size-1 axis's stride does not matter.
    assert syncmem.from_dlpack(a[1:2, :], device=EMULATED).shape == (1, 6)


def test_not_a_producer():
    with pytest.raises(TypeError, match="has no __dlpack__"):
        syncmem.from_dlpack([1, 2, 3], device=EMULATED)


def test_host_memory_needs_a_device():
    with pytest.raises(ValueError, match="'cpu' is not a syncmem device"):
        syncmem.from_dlpack(np.zeros(3), device="cpu")


def test_a_stream_of_another_device_is_refused_on_export():
    t = syncmem.tensor(4, "float32", EMULATED)
    with pytest.raises(syncmem.LogicError, match="emulated:1.*emulated:0"):
        t.__dlpack__(stream=syncmem.stream(OTHER_EMULATED), max_version=(1, 1))
    with pytest.raises(BufferError, match="stream=None"):
        t.__dlpack__(stream=7, max_version=(1, 1))
