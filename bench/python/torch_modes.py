"""What the PyTorch benchmarks share: the environment of a worker process for
an allocator mode, installing syncmem's allocator in it, checking the modes
and workloads asked for, and the end of a failed worker's output.

  torch-default      PyTorch's CUDA caching allocator
  torch-expandable   the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  syncmem-*          syncmem.torch.enable() before any CUDA allocation, with
                     SYNCMEM_ALLOC_CONF as the benchmark gives it
"""

from __future__ import annotations

import os


def mode_environment(mode: str, syncmem_conf: str | None = None) -> dict[str, str]:
    """This process's environment for a worker of `mode`: neither allocator's
    settings inherited, PyTorch's expandable segments for torch-expandable,
    and `syncmem_conf` as SYNCMEM_ALLOC_CONF where given."""
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.pop("SYNCMEM_ALLOC_CONF", None)
    if mode == "torch-expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if syncmem_conf:
        env["SYNCMEM_ALLOC_CONF"] = syncmem_conf
    return env


def enable_allocator(mode: str) -> None:
    """Installs syncmem as PyTorch's allocator for the syncmem modes; must run
    before the first CUDA allocation."""
    if not mode.startswith("syncmem"):
        return
    try:
        import syncmem.torch as syncmem_torch  # noqa: PLC0415
    except ImportError as e:
        raise SystemExit(
            f"mode {mode}: syncmem.torch is not available ({e}); build and install the Python "
            "package with its PyTorch integration (pip install .) to measure the syncmem modes"
        ) from e
    syncmem_torch.enable()


def choices(value: str, valid, option: str) -> list[str]:
    """The comma-separated names of `value`, each one of `valid`; exits naming `option` otherwise."""
    names = value.split(",")
    for name in names:
        if name not in valid:
            raise SystemExit(f"{option}: unknown {name!r}; valid: {', '.join(valid)}")
    return names


def tail(text, lines: int = 15) -> str:
    """The last `lines` lines of a worker's output (text or bytes)."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    kept = (text or "").strip().splitlines()[-lines:]
    return "\n".join(kept) if kept else "(no output)"
