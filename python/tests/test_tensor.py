"""syncmem.tensor and syncmem.synced_memory on emulated devices: shapes,
dtypes, states, host access through numpy (zero-copy), prefetches,
statistics, and errors as Python exceptions with syncmem's messages."""

import gc
import os
import subprocess

import numpy as np
import pytest
from conftest import EMULATED, OTHER_EMULATED, random_array

import syncmem

DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64"]


def test_package_describes_its_build():
    assert isinstance(syncmem.__version__, str) and syncmem.__version__.count(".") == 2
    assert isinstance(syncmem.built_with_cuda, bool)
    assert syncmem.device_count("emulated") == 2
    assert str(syncmem.device("emulated", 1)) == OTHER_EMULATED


# Symbols a statically linked C++ runtime brings (std::locale, iostreams'
# base, operator new/delete, the exception ABI). Exported by a shared library,
# they bind the process's libstdc++.so to a second copy: a process that loaded
# syncmem before PyTorch aborted in free().
CXX_RUNTIME_PREFIXES = ("_ZNSt6locale", "_ZNKSt6locale", "_ZNSt8ios_base", "_Znwm", "_Znam", "_ZdlPv", "_ZdaPv",
                        "__cxa_", "__gxx_personality")


def test_the_native_libraries_export_no_cxx_runtime():
    folder = os.path.dirname(syncmem.__file__)
    libraries = [os.path.join(folder, f) for f in os.listdir(folder) if ".so" in f]
    assert any(os.path.basename(f).startswith("libsyncmem") for f in libraries), libraries
    for library in libraries:
        listing = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True, check=True)
        names = [line.split()[-1] for line in listing.stdout.splitlines() if line.strip()]
        assert names, f"{library}: no dynamic symbols"
        leaked = [n for n in names if n.startswith(CXX_RUNTIME_PREFIXES)]
        assert not leaked, f"{library} exports the C++ runtime: {leaked[:5]}"


def test_exceptions_derive_from_syncmem_error_and_the_builtin_one():
    assert issubclass(syncmem.LogicError, syncmem.Error) and issubclass(syncmem.LogicError, ValueError)
    assert issubclass(syncmem.OutOfMemoryError, MemoryError)
    assert issubclass(syncmem.CudaError, RuntimeError)
    assert issubclass(syncmem.UnsupportedError, RuntimeError)


@pytest.mark.parametrize("dtype", DTYPES)
def test_shape_dtype_and_sizes(dtype):
    t = syncmem.tensor((3, 4, 5), dtype, EMULATED)
    assert t.shape == (3, 4, 5)
    assert t.dtype == dtype
    assert t.ndim == 3 and t.numel == 60 and len(t) == 3
    assert t.itemsize == np.dtype(dtype).itemsize
    assert t.nbytes == 60 * t.itemsize
    assert t.device == syncmem.device(EMULATED)


def test_dtypes_are_taken_the_numpy_way():
    for given in ("float32", np.float32, np.dtype("float32")):
        assert syncmem.tensor(2, given, EMULATED).dtype == "float32"
    assert syncmem.tensor(2, float, EMULATED).dtype == "float64"
    assert syncmem.tensor(2, "bfloat16", EMULATED).dtype == "bfloat16"


def test_bfloat16_has_no_numpy_view_but_its_bits_do(rng):
    t = syncmem.tensor(16, "bfloat16", EMULATED)
    with pytest.raises(TypeError, match="numpy has no bfloat16"):
        t.numpy()
    bits = random_array(rng, 16, "int16")
    syncmem.tensor.from_storage(t.storage, t.shape, "int16").numpy(writable=True)[...] = bits
    c = t.clone(OTHER_EMULATED)
    assert c.dtype == "bfloat16"
    assert syncmem.tensor.from_storage(c.storage, c.shape, "int16").numpy().tobytes() == bits.tobytes()


def test_unsupported_dtype_is_a_type_error_naming_the_supported_ones():
    with pytest.raises(TypeError, match="complex64.*float32"):
        syncmem.tensor(2, np.complex64, EMULATED)


def test_bad_shape_and_device_are_clear_errors():
    with pytest.raises(syncmem.LogicError, match="-1"):
        syncmem.tensor((2, -1), "float32", EMULATED)
    with pytest.raises(TypeError, match="sequence of ints"):
        syncmem.tensor(("a",), "float32", EMULATED)
    with pytest.raises(ValueError, match="cuda:N"):
        syncmem.tensor(2, "float32", "tpu:0")
    with pytest.raises(syncmem.Error, match="index 7 is out of range for emulated devices"):
        syncmem.tensor(2, "float32", "emulated:7").numpy(writable=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_view_is_the_host_side_byte_for_byte(rng, dtype):
    t = syncmem.tensor((7, 13), dtype, EMULATED)
    a = t.numpy(writable=True)
    assert a.shape == (7, 13) and a.dtype == np.dtype(dtype)
    assert a.ctypes.data == t.host_ptr()  # zero-copy
    assert a.flags.writeable
    data = random_array(rng, (7, 13), dtype)
    a[...] = data
    assert t.state == syncmem.sync_state.at_host
    # Through the device and back: a clone on the other device copies device to device.
    t.prefetch_to_device()
    t.synchronize()
    c = t.clone(OTHER_EMULATED)
    assert c.device == syncmem.device(OTHER_EMULATED)
    assert c.numpy().tobytes() == data.tobytes()


def test_read_only_view_leaves_the_state_alone(rng):
    t = syncmem.tensor(64, "uint8", EMULATED)
    t.numpy(writable=True)[...] = random_array(rng, 64, "uint8")
    t.device_ptr(writable=True)  # the device side is the newest now
    assert t.state == syncmem.sync_state.at_device
    a = t.numpy()
    assert not a.flags.writeable
    assert t.state == syncmem.sync_state.synced
    with pytest.raises(ValueError):
        a[0] = 1


def test_states_follow_access(rng):
    t = syncmem.tensor(1000, "float32", EMULATED, zero_fill=False)
    assert t.state == syncmem.sync_state.uninitialized
    t.numpy(writable=True)[...] = random_array(rng, 1000, "float32")
    assert t.state == syncmem.sync_state.at_host
    t.prefetch_to_device()
    t.synchronize()
    assert t.state == syncmem.sync_state.synced
    t.mark_device_modified()
    assert t.state == syncmem.sync_state.at_device
    t.prefetch_to_host()
    t.synchronize()
    assert t.state == syncmem.sync_state.synced
    assert t.counters["to_device_copies"] == 1 and t.counters["to_host_copies"] == 1
    assert t.counters["to_device_bytes"] == 4000


def test_fill_zero_view_slice_reshape(rng):
    t = syncmem.tensor((4, 6), "int32", EMULATED)
    t.fill(7)
    assert (t.numpy() == 7).all()
    data = random_array(rng, (4, 6), "int32")
    t.numpy(writable=True)[...] = data
    s = t.slice(1, 3)
    assert s.shape == (2, 6) and s.numpy().tobytes() == data[1:3].tobytes()
    v = t.view((24,))
    assert v.numpy().tobytes() == data.tobytes()
    t.zero()
    assert not t.numpy().any()
    t.reshape((2, 2))
    assert t.shape == (2, 2) and t.reallocations == 0


def test_copy_from_between_devices(rng):
    a = syncmem.tensor((5, 5), "float64", EMULATED)
    data = random_array(rng, (5, 5), "float64")
    a.numpy(writable=True)[...] = data
    b = syncmem.tensor((5, 5), "float64", OTHER_EMULATED)
    b.copy_from(a)
    assert b.numpy().tobytes() == data.tobytes()


def test_statistics_count_device_memory():
    syncmem.synchronize(EMULATED)
    before = syncmem.memory_stats(EMULATED)
    t = syncmem.tensor(1 << 20, "uint8", EMULATED)
    t.prefetch_to_device()
    t.synchronize()
    after = syncmem.memory_stats(EMULATED)
    assert after["live_allocations"] == before["live_allocations"] + 1
    assert after["requested_bytes"] >= before["requested_bytes"] + (1 << 20)
    assert after["allocations"] == before["allocations"] + 1
    del t
    syncmem.synchronize(EMULATED)
    assert syncmem.memory_stats(EMULATED)["live_allocations"] == before["live_allocations"]


def test_statistics_total_every_byte_asked_for_and_given_back(rng):
    gc.collect()
    gc.disable()  # no garbage of earlier tests freed in between
    try:
        syncmem.synchronize(EMULATED)
        before = syncmem.memory_stats(EMULATED)
        sizes = [int(n) for n in rng.integers(1, 1 << 20, size=8)]
        tensors = [syncmem.tensor(n, "uint8", EMULATED) for n in sizes]
        for t in tensors:
            t.prefetch_to_device()
            t.synchronize()
        during = syncmem.memory_stats(EMULATED)
        asked = during["total_requested_bytes"] - before["total_requested_bytes"]
        handed = during["total_allocated_bytes"] - before["total_allocated_bytes"]
        assert asked == sum(sizes)
        assert handed >= asked
        assert during["total_freed_bytes"] == before["total_freed_bytes"]
        del t, tensors
        syncmem.synchronize(EMULATED)
        after = syncmem.memory_stats(EMULATED)
        assert after["total_requested_freed_bytes"] - before["total_requested_freed_bytes"] == asked
        assert after["total_freed_bytes"] - before["total_freed_bytes"] == handed
        assert after["total_requested_bytes"] == during["total_requested_bytes"]
    finally:
        gc.enable()


def test_synced_memory_and_tensors_over_it(rng):
    m = syncmem.synced_memory(256, EMULATED, label="bytes")
    assert m.size == 256 and m.label == "bytes" and m.device == syncmem.device(EMULATED)
    t = syncmem.tensor.from_storage(m, (64,), "float32")
    data = random_array(rng, 64, "float32")
    t.numpy(writable=True)[...] = data
    assert m.state == syncmem.sync_state.at_host
    assert m.host_ptr() == t.host_ptr()
    m.prefetch_to_device()
    m.synchronize()
    assert m.state == syncmem.sync_state.synced and m.has_device_memory
    assert t.storage.size == 256
    with pytest.raises(syncmem.LogicError, match="256"):
        syncmem.tensor.from_storage(m, (65,), "float32")


def test_streams_of_a_device():
    s = syncmem.stream(EMULATED)
    assert s.device == syncmem.device(EMULATED) and s.owned
    t = syncmem.tensor(16, "float32", EMULATED)
    t.fill(1.5, stream=s)
    t.prefetch_to_device(stream=s)
    s.synchronize()
    assert (t.numpy() == 1.5).all()


def test_a_stream_of_another_device_is_refused_by_name():
    t = syncmem.tensor(16, "float32", EMULATED)
    other = syncmem.stream(OTHER_EMULATED)
    with pytest.raises(syncmem.LogicError, match="emulated:1.*emulated:0"):
        t.prefetch_to_device(stream=other)
    with pytest.raises(syncmem.LogicError, match="emulated:1"):
        t.device_ptr(stream=other)
    with pytest.raises(syncmem.LogicError, match="not a CUDA device"):
        t.prefetch_to_device(stream=12345)
    with pytest.raises(TypeError, match="stream"):
        t.prefetch_to_device(stream="fast")
