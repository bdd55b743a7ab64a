#!/usr/bin/env python3
"""What PyTorch's memory history costs an allocation, on PyTorch's allocator and on syncmem's.

A tight loop of allocation/free pairs (torch.empty of a uint8 tensor on the
GPU, dropped at once: PyTorch's allocate and free, no kernel) of 512 B, 64 KiB
and 2 MiB, timed with recording off and with

  torch.cuda.memory._record_memory_history(enabled="all", context="all",
                                           stacks="python", max_entries=100000)

on (every allocation and free recorded with its Python stack), in two modes,
each in a process of its own, set before CUDA is touched:

  torch-default    PyTorch's CUDA caching allocator
  syncmem-default  syncmem.torch.enable()

In a process, --repeats rounds each time --pairs pairs per size with
recording off and with it on (which first alternating round by round), the
garbage collector off; a process's figure is the median over its rounds. At
its end it checks that recording recorded: 100 allocations of 512 B with
recording on must be in torch.cuda.memory._snapshot()'s trace, with Python
frames. The driver runs --processes rounds, the modes alternating process by
process, and reports per size and mode the median ns per pair with its spread
(min..max of the processes' figures), the on/off ratio (median of the
processes'), and syncmem's figures over PyTorch's, off and on. What it is to
show: recording off costs nothing measurable under syncmem, and recording on
costs at most what PyTorch's own recording costs. It exits non-zero if a
worker failed or recorded nothing.

  python3 bench/python/torch_history.py --processes 3 --json results.json
  python3 bench/python/torch_history.py --processes 1 --pairs 2000 --repeats 2   # a quick check
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

from torch_modes import choices, enable_allocator, mode_environment, tail

MODES = ("torch-default", "syncmem-default")
SIZES = {"512B": 512, "64KiB": 64 << 10, "2MiB": 2 << 20}
MAX_ENTRIES = 100_000
CHECK_ALLOCATIONS = 100


# ---- one process: every size in one mode --------------------------------------


def worker(mode: str, pairs: int, repeats: int) -> dict:
    enable_allocator(mode)
    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: the benchmark needs a GPU")
    device = torch.device("cuda", torch.cuda.current_device())
    history = torch.cuda.memory._record_memory_history

    def set_recording(on: bool) -> None:
        if on:
            history(enabled="all", context="all", stacks="python", max_entries=MAX_ENTRIES)
        else:
            history(enabled=None)

    def ns_per_pair(nbytes: int, count: int) -> float:
        empty, uint8 = torch.empty, torch.uint8
        start = time.perf_counter_ns()
        for _ in range(count):
            empty(nbytes, dtype=uint8, device=device)  # freed as soon as it is made
        return (time.perf_counter_ns() - start) / count

    torch.cuda.init()
    for nbytes in SIZES.values():  # a cached block of every size, and the loop's code warm
        ns_per_pair(nbytes, 1000)
    torch.cuda.synchronize()
    ns: dict[str, dict[str, list[float]]] = {name: {"off": [], "on": []} for name in SIZES}
    gc.disable()
    try:
        for round_ in range(repeats):
            for state in ("off", "on") if round_ % 2 == 0 else ("on", "off"):
                set_recording(state == "on")
                for name, nbytes in SIZES.items():
                    ns_per_pair(nbytes, max(1, pairs // 20))  # settle after the switch
                    ns[name][state].append(ns_per_pair(nbytes, pairs))
        set_recording(False)
    finally:
        gc.enable()

    # Did recording record? The last allocations of the trace, with their stacks.
    set_recording(True)
    for _ in range(CHECK_ALLOCATIONS):
        torch.empty(512, dtype=torch.uint8, device=device)
    snapshot = torch.cuda.memory._snapshot()
    set_recording(False)
    traces = snapshot.get("device_traces", [])
    trace = traces[device.index] if device.index < len(traces) else []
    last = [e for e in trace[-4 * CHECK_ALLOCATIONS:] if e.get("action") == "alloc" and e.get("size") == 512]
    return {
        "mode": mode,
        "pairs": pairs,
        "repeats": repeats,
        "ns": ns,
        "median_ns": {name: {state: statistics.median(v) for state, v in states.items()}
                      for name, states in ns.items()},
        "recorded_allocs": len(last),
        "recorded_with_frames": sum(1 for e in last if e.get("frames")),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
    }


# ---- the driver --------------------------------------------------------------


def run_worker(args, mode: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--pairs", str(args.pairs),
           "--repeats", str(args.repeats)]
    try:
        proc = subprocess.run(cmd, check=False, env=mode_environment(mode), capture_output=True, text=True,
                              timeout=args.process_timeout)
    except subprocess.TimeoutExpired as e:
        return {"mode": mode, "error": f"timed out after {args.process_timeout:.0f} s", "stderr": tail(e.stderr)}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        status = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        return {"mode": mode, "error": status, "stderr": tail(proc.stderr)}
    r = json.loads(lines[-1])
    if r["recorded_allocs"] < CHECK_ALLOCATIONS or r["recorded_with_frames"] < CHECK_ALLOCATIONS:
        r["error"] = (f"recording on: {r['recorded_allocs']} of the last {CHECK_ALLOCATIONS} allocations in the "
                      f"trace, {r['recorded_with_frames']} with Python frames")
        r["stderr"] = tail(proc.stderr)
    return r


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[0]["error"] if runs else "not run"}
    out = {"processes": len(ok), "failures": len(runs) - len(ok)}
    for name in SIZES:
        off = [r["median_ns"][name]["off"] for r in ok]
        on = [r["median_ns"][name]["on"] for r in ok]
        out[name] = {"off_ns": spread(off), "on_ns": spread(on),
                     "on_over_off": spread([b / a for a, b in zip(off, on)])}
    return out


def print_table(summary: dict[str, dict]) -> None:
    def cell(s: dict) -> str:
        return f"{s['median']:.0f} ({s['min']:.0f}..{s['max']:.0f})"

    print(f"{'size':6} {'mode':16} {'off ns/pair (median, min..max)':>31} {'on ns/pair (median, min..max)':>31} "
          f"{'on/off':>7}")
    for mode, s in summary.items():
        if "error" in s:
            print(f"{'all':6} {mode:16} failed: {s['error']}")
    for name in SIZES:
        for mode, s in summary.items():
            if "error" in s:
                continue
            f = s[name]
            print(f"{name:6} {mode:16} {cell(f['off_ns']):>31} {cell(f['on_ns']):>31} "
                  f"{f['on_over_off']['median']:7.2f}")
        torch_s, syncmem_s = summary.get("torch-default", {}), summary.get("syncmem-default", {})
        if name in torch_s and name in syncmem_s:
            off = syncmem_s[name]["off_ns"]["median"] / torch_s[name]["off_ns"]["median"]
            on = syncmem_s[name]["on_ns"]["median"] / torch_s[name]["on_ns"]["median"]
            print(f"{name:6} {'syncmem/torch':16} {off:30.3f}x {on:30.3f}x")


def drive(args) -> int:
    modes = choices(args.modes, MODES, "--modes")
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    unavailable: set[str] = set()
    for round_ in range(args.processes):
        for m in modes if round_ % 2 == 0 else list(reversed(modes)):
            if m in unavailable:  # reported once, not run again
                continue
            r = run_worker(args, m)
            runs[m].append(r)
            if "error" in r:
                print(f"  round {round_ + 1} {m}: failed, {r['error']}\n{r['stderr']}", file=sys.stderr, flush=True)
                if "syncmem.torch is not available" in r["stderr"]:
                    unavailable.add(m)
            else:
                figures = ", ".join(f"{n} {v['off']:.0f}/{v['on']:.0f}" for n, v in r["median_ns"].items())
                print(f"  round {round_ + 1} {m}: ns/pair off/on {figures}", file=sys.stderr, flush=True)
    summary = {m: summarize(runs[m]) for m in modes}
    print_table(summary)
    for m, rs in runs.items():
        for i, r in enumerate(rs):
            if "error" in r:
                print(f"\n{m}, process {i + 1} failed: {r['error']}; the end of its stderr:")
                print("    " + r["stderr"].replace("\n", "\n    "))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"summary": summary, "runs": runs, "processes": args.processes, "pairs": args.pairs,
                       "repeats": args.repeats, "sizes": SIZES, "max_entries": MAX_ENTRIES}, f, indent=1)
    return 1 if any("error" in r for rs in runs.values() for r in rs) else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    p.add_argument("--processes", type=int, default=3, help="processes per mode, alternating")
    p.add_argument("--pairs", type=int, default=20_000, help="allocation/free pairs per timed loop")
    p.add_argument("--repeats", type=int, default=5, help="timed loops per size and state in a process")
    p.add_argument("--json", help="write the summary and every process's figures here")
    p.add_argument("--process-timeout", type=float, default=600, help="seconds a worker may take")
    p.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.processes < 1 or args.pairs < 1 or args.repeats < 1:
        raise SystemExit("--processes, --pairs and --repeats must be at least 1")
    if args.worker:
        print(json.dumps(worker(args.worker, args.pairs, args.repeats)))
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
