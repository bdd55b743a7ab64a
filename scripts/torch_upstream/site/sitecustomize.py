"""Put first on PYTHONPATH by scripts/torch-upstream-tests.

Python imports sitecustomize at the start of every interpreter, so every
process of a run (pytest, and the children PyTorch's tests spawn, as
torch.multiprocessing's spawn context and `python -c` do) makes syncmem's
allocator PyTorch's when SYNCMEM_TORCH_ENABLE=1, before CUDA is used. Forked
children inherit it. Unset, it does nothing but hand over to the
sitecustomize it shadows, if there is one.
"""

import importlib.util
import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", candidate)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


_chain()

if os.environ.get("SYNCMEM_TORCH_ENABLE") == "1":
    try:
        import torch  # noqa: F401

        import syncmem.torch

        syncmem.torch.enable()
    except Exception as e:
        # site.py would swallow it; say which process ran on PyTorch's allocator
        sys.stderr.write(
            f"torch-upstream-tests sitecustomize: syncmem.torch.enable() failed in pid {os.getpid()}: "
            f"{type(e).__name__}: {e}\n"
        )
