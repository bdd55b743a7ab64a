"""pytest plugin of scripts/torch-upstream-tests (loaded with `-p conftest_syncmem`).

Runs PyTorch's own tests on syncmem's allocator when SYNCMEM_TORCH_ENABLE=1,
on PyTorch's otherwise. pytest imports a `-p` plugin before it collects the
test module, so syncmem.torch.enable() runs before anything touches CUDA; the
children the tests spawn enable it through site/sitecustomize.py, which the
runner puts first on PYTHONPATH (it has already enabled it in this process
too: a second enable() is harmless).

It also writes one JSON line per test phase to SYNCMEM_UPSTREAM_EVENTS, as the
test starts and ends, so that what a crashed or killed run got through is
known although pytest never wrote its junit xml; and, at the end of the
session, the versions the run used to SYNCMEM_UPSTREAM_META.
"""

from __future__ import annotations

import json
import os
import sys
import time

MODE = "syncmem" if os.environ.get("SYNCMEM_TORCH_ENABLE") == "1" else "native"

_state: dict = {"mode": MODE, "syncmem_enabled": None, "enable_error": None, "compat": []}


def _enable() -> None:
    if MODE == "native":
        module = sys.modules.get("syncmem.torch")  # someone else's sitecustomize, say
        _state["syncmem_enabled"] = bool(module.enabled()) if module else False
        return
    try:
        import torch  # noqa: F401  (syncmem.torch needs it loaded first)
        import syncmem.torch

        syncmem.torch.enable()
        _state["syncmem_enabled"] = bool(syncmem.torch.enabled())
    except Exception as e:  # reported by pytest_configure
        _state["enable_error"] = f"{type(e).__name__}: {e}"


def _compat() -> None:
    # Some upstream revisions of test_cuda.py import TEST_CUDAMALLOCASYNC from
    # common_utils, which torch 2.11's lacks (it defines it in the test file).
    # Decided from the environment, as PyTorch's allocator decides its backend,
    # so that nothing here touches CUDA.
    try:
        import torch.testing._internal.common_utils as common_utils
    except Exception:
        return
    if not hasattr(common_utils, "TEST_CUDAMALLOCASYNC"):
        conf = ",".join(os.environ.get(k, "") for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"))
        common_utils.TEST_CUDAMALLOCASYNC = "backend:cudaMallocAsync" in conf.replace(" ", "")
        _state["compat"].append("common_utils.TEST_CUDAMALLOCASYNC")


# Tests that assert PyTorch's own allocator's internals, not behaviour a
# program depends on: skipped on syncmem, each with the reason in the report.
NATIVE_INTERNALS = {
    "TestCudaMallocAsync::test_allocator_backend": (
        "asserts native internals: the backend PYTORCH_ALLOC_CONF selects in a new interpreter"
        " ('cudaMallocAsync'); under syncmem.torch it is 'syncmem'"
    ),
    "TestCudaMallocAsync::test_allocator_settings": (
        "asserts native internals: the exact block sizes of PyTorch's roundup_power2_divisions"
    ),
    "TestCuda::test_graph_memory_stats_and_use_result_after_destroy_graph": (
        "asserts native internals: the cudaMalloc counts and bytes of PyTorch's size classes"
        " (2 MiB small and 20 MiB large buffers) and its small/large pool counters"
    ),
    "TestCuda::test_graph_two_successive": (
        "asserts native internals: reserved bytes saved by sharing a pool equal one 2 MiB"
        " small buffer (upstream marks the check 'specific to the native allocator')"
    ),
    "TestCudaMallocAsync::test_memory_plots": (
        "asserts native internals: after trace_plot(filter_freed=True) has removed every"
        " alloc/free pair, the freed 64 KiB tensor's size is still in the snapshot only as the"
        " stale requested_size PyTorch leaves on the free block it merged into"
    ),
    "TestMemPool::test_mempool_no_split": (
        "asserts native internals: a 4 MiB request takes a 20 MiB segment (kLargeBuffer) that"
        " the next one splits, unless no_split"
    ),
    "TestMemPool::test_nested_mempool": (
        "asserts native internals: each 20 MiB allocation is a segment of its own; syncmem.torch"
        " maps a pool's allocations into one contiguous growable range"
    ),
}

# What a skipped test's `finally` does that later tests rely on, done in its
# place. test_cycles leaves memory history on (observe_tensor_cycles records
# it and nothing turns it off); natively test_memory_plots, next in order,
# turns it off, and test_memory_plots_free_segment_stack expects it off.
CLEANUP_OF_SKIPPED = {
    "TestCudaMallocAsync::test_memory_plots": "memory history turned off",
}

_enable()
_compat()

_events_path = os.environ.get("SYNCMEM_UPSTREAM_EVENTS")
_events = open(_events_path, "a", encoding="utf-8") if _events_path else None


def _event(record: dict) -> None:
    if _events is None:
        return
    record["t"] = round(time.time(), 3)
    _events.write(json.dumps(record) + "\n")
    _events.flush()  # the kernel keeps it if the process dies next


def _first_line(report) -> str:
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = getattr(crash, "message", None)
    if text is None and report.longrepr is not None:
        longrepr = report.longrepr
        # a skip's longrepr is (path, line, reason)
        text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def pytest_configure(config):
    import pytest

    if _state["enable_error"] is not None:
        pytest.exit(f"torch-upstream-tests ({MODE}): {_state['enable_error']}", returncode=3)
    if MODE == "syncmem" and not _state["syncmem_enabled"]:
        pytest.exit(
            "torch-upstream-tests: syncmem.torch.enable() returned but enabled() is False", returncode=3
        )
    if MODE == "native" and _state["syncmem_enabled"]:
        pytest.exit("torch-upstream-tests: the native run has syncmem's allocator installed", returncode=3)


def pytest_collection_modifyitems(config, items):
    if MODE != "syncmem":
        return
    import pytest

    # A test whose expectation depends on the allocator's mode reads it from
    # PYTORCH_CUDA_ALLOC_CONF (EXPANDABLE_SEGMENTS), which syncmem does not
    # read: syncmem.torch's default is its growable range, and its graph pools
    # cut large blocks from a growable segment per stream whatever the mode,
    # so the expandable expectations are the ones that apply.
    for module in {item.module for item in items if hasattr(item, "module")}:
        if getattr(module, "EXPANDABLE_SEGMENTS", True) is False:
            module.EXPANDABLE_SEGMENTS = True
            _state["compat"].append(f"{module.__name__}.EXPANDABLE_SEGMENTS=True")
    for item in items:
        for name, reason in NATIVE_INTERNALS.items():
            if item.nodeid.endswith("::" + name):
                item.add_marker(pytest.mark.skip(reason=reason))


def pytest_runtest_teardown(item, nextitem):
    if MODE != "syncmem":
        return
    for name, what in CLEANUP_OF_SKIPPED.items():
        if item.nodeid.endswith("::" + name):
            import torch

            torch.cuda.memory._record_memory_history(None)
            _state["compat"].append(f"after skipped {name}: {what}")


def pytest_report_header(config):
    return (
        f"torch-upstream-tests: mode={MODE} syncmem.torch.enabled={_state['syncmem_enabled']}"
        f" compat={','.join(_state['compat']) or 'none'}"
    )


def pytest_runtest_logstart(nodeid, location):
    _event({"event": "start", "nodeid": nodeid})


def pytest_runtest_logfinish(nodeid, location):
    _event({"event": "finish", "nodeid": nodeid})


def pytest_runtest_logreport(report):
    if report.when != "call" and report.outcome == "passed":
        return
    outcome = report.outcome
    if hasattr(report, "wasxfail"):
        outcome = "xfail" if report.skipped else "xpass"
    _event(
        {
            "event": "report",
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": outcome,
            "duration": round(report.duration, 3),
            "message": "" if outcome == "passed" else _first_line(report),
        }
    )


def pytest_sessionfinish(session, exitstatus):
    meta = {"mode": MODE, **_state, "python": sys.version.split()[0]}
    try:
        import torch

        meta["torch"] = torch.__version__
        meta["torch_git"] = getattr(torch.version, "git_version", None)
        meta["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            meta["device"] = torch.cuda.get_device_name(0)
    except Exception as e:
        meta["torch_error"] = f"{type(e).__name__}: {e}"
    try:
        from importlib.metadata import version

        meta["syncmem"] = version("syncmem")
    except Exception:
        meta["syncmem"] = None
    path = os.environ.get("SYNCMEM_UPSTREAM_META")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
    if _events is not None:
        _events.close()
