"""What the PyTorch benchmarks share: the environment of a worker process for
an allocator mode, installing syncmem's allocator in it, checking the modes
and workloads asked for, and the end of a failed worker's output.

  torch-default      PyTorch's CUDA caching allocator
  torch-expandable   the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  syncmem-*          syncmem.torch.enable() before any CUDA allocation, with
                     SYNCMEM_ALLOC_CONF as the benchmark gives it
"""

from __future__ import annotations

import json
import os
import subprocess


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


def run_worker_process(cmd: list[str], mode: str, timeout: float, failed: dict) -> dict:
    """Runs a worker of `mode` (its environment from mode_environment) and
    returns the last JSON line it printed; on failure, `failed` with the error
    and the end of its stderr."""
    try:
        proc = subprocess.run(cmd, check=False, env=mode_environment(mode), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return failed | {"error": f"timed out after {timeout:.0f} s", "stderr": tail(e.stderr)}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        status = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        return failed | {"error": status, "stderr": tail(proc.stderr)}
    return json.loads(lines[-1])
