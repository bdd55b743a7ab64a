"""Tensors sent to other processes through multiprocessing (spawn): the
receiver maps the same device memory (emulated devices here, CUDA on a GPU),
reads what the sender wrote, writes what the sender then reads, and the
sender gets the memory back once the receiver has exited."""

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

from conftest import checked, cuda_available

SCRIPT = textwrap.dedent(
    """
    import multiprocessing as mp
    import pickle
    import sys
    from multiprocessing.reduction import ForkingPickler

    import numpy as np

    import syncmem

    DEVICE = sys.argv[1]


    def enable():
        if DEVICE.startswith("emulated"):
            syncmem.enable_emulated_devices(count=2, memory_per_device=256 << 20)


    def receiver(inbox, outbox):
        enable()
        t = inbox.get()
        outbox.put(t.numpy().copy())
        seed = inbox.get()
        w = t.numpy(writable=True)
        w[...] = np.random.default_rng(seed).standard_normal(w.shape, dtype=np.float32)
        t.device_ptr()  # the device side, up to date
        t.synchronize()
        outbox.put("written")
        handle = inbox.get()  # one pickled handle, loaded twice
        again = pickle.loads(handle)
        outbox.put(again.numpy().copy())
        try:
            pickle.loads(handle)
            outbox.put("imported twice")
        except syncmem.LogicError as e:
            outbox.put(str(e))


    if __name__ == "__main__":
        enable()
        ctx = mp.get_context("spawn")
        rng = np.random.default_rng()
        shape = (int(rng.integers(64, 512)), int(rng.integers(64, 256)))
        t = syncmem.tensor(shape, "float32", DEVICE)
        values = rng.standard_normal(shape, dtype=np.float32)
        t.numpy(writable=True)[...] = values
        inbox, outbox = ctx.Queue(), ctx.Queue()
        p = ctx.Process(target=receiver, args=(inbox, outbox))
        p.start()
        inbox.put(t)
        assert np.array_equal(outbox.get(timeout=120), values), "the receiver read other bytes"
        seed = int(rng.integers(1 << 30))
        inbox.put(seed)
        assert outbox.get(timeout=120) == "written"
        expected = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
        assert np.array_equal(t.numpy(), expected), "the sender does not see the receiver's writes"
        inbox.put(bytes(ForkingPickler.dumps(t)))
        assert np.array_equal(outbox.get(timeout=120), expected)
        message = outbox.get(timeout=120)
        assert "imported already" in message, message
        p.join(120)
        assert p.exitcode == 0, p.exitcode
        assert syncmem.ipc_exports_held() == 2, syncmem.ipc_exports_held()
        # The receiver has exited: both exports come back.
        assert syncmem.ipc_collect() == 2
        assert syncmem.ipc_exports_held() == 0
        print("shared and released")
    """
)


def run(device: str):
    # A script of its own: spawn's children import the parent's main module.
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "share.py")
        with open(path, "w") as f:
            f.write(SCRIPT)
        return checked(subprocess.run([sys.executable, path, device], capture_output=True, text=True,
                                      timeout=600, cwd=folder))


def test_a_tensor_crosses_processes_on_an_emulated_device():
    out = run("emulated:0").stdout
    assert "shared and released" in out, out


@pytest.mark.skipif(not cuda_available(), reason="no CUDA device")
def test_a_tensor_crosses_processes_on_a_cuda_device():
    out = run("cuda:0").stdout
    assert "shared and released" in out, out
