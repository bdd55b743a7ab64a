#!/usr/bin/env python3
"""Real PyTorch training and inference loops under several allocator modes.

Workloads (models from configs, random init, random data: no network needed):
  gpt2      transformers.GPT2LMHeadModel, 8 layers, batch 4..16 and sequence
            64..1024 drawn per step, bf16 autocast, AdamW
  resnet50  torchvision.models.resnet50, batch 16..96 drawn per step, bf16
            autocast, AdamW
  infer     resnet50 inference (no_grad, bf16 autocast), batch 1..128 per step

Modes (each in a process of its own, set before CUDA is touched):
  torch-default       PyTorch's CUDA caching allocator
  torch-expandable    the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  syncmem-default     syncmem.torch.enable() before any CUDA allocation (under
                      PyTorch: expandable:1,grow_from_idle:1)
  syncmem-plain       the same with SYNCMEM_ALLOC_CONF=expandable:0 (plain
                      segments, the C++ library's default)
More on request (--modes):
  syncmem-expandable  SYNCMEM_ALLOC_CONF=expandable:1,grow_from_idle:0
  syncmem-from-idle   SYNCMEM_ALLOC_CONF=expandable:1,grow_from_idle:1 (the
                      default, spelled out)
  syncmem-from-idle-8mb, syncmem-from-idle-20mb   ...,expandable_page_mb:8 (20)
  syncmem-from-idle-pages                         ...,expandable_large_page_mb:0 (pages only)

The driver runs every (workload, mode) pair in --processes rounds, the modes
alternating process by process so that drift of the machine does not pick a
winner, and reports per pair: median step time with its spread (min..max of
the processes' medians), peak reserved, peak requested, their ratio, and
allocator calls per step (memory_stats' allocation count over the timed steps).

  python3 bench/python/torch_workloads.py --processes 3 --json results.json
  python3 bench/python/torch_workloads.py --record-trace bench/traces

--record-trace records PyTorch's allocation events (torch-default) with
torch.cuda.memory._record_memory_history and writes each workload's trace in
syncmem's replay format (`# syncmem.replay/1`, read by alloc/replay; see
bench/allocator_traces.hpp), one file per workload.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

from torch_modes import choices, enable_allocator, mode_environment

MODES = ("torch-default", "torch-expandable", "syncmem-default", "syncmem-plain")
MORE_MODES = {  # SYNCMEM_ALLOC_CONF of each
    "syncmem-plain": "expandable:0",
    "syncmem-expandable": "expandable:1,grow_from_idle:0",
    "syncmem-from-idle": "expandable:1,grow_from_idle:1",
}
PAGE_MODES = {  # the growable range's pages, over the default
    "syncmem-from-idle-8mb": "expandable_page_mb:8",
    "syncmem-from-idle-20mb": "expandable_page_mb:20",
    "syncmem-from-idle-pages": "expandable_large_page_mb:0",
}
ALL_MODES = tuple(dict.fromkeys((*MODES, *MORE_MODES, *PAGE_MODES)))
WORKLOADS = ("gpt2", "resnet50", "infer")
REPLAY_FORMAT_LINE = "# syncmem.replay/1"


def syncmem_conf(mode: str) -> str | None:
    """SYNCMEM_ALLOC_CONF for the modes that set it."""
    if mode in MORE_MODES:
        return MORE_MODES[mode]
    if mode in PAGE_MODES:
        return f"expandable:1,grow_from_idle:1,{PAGE_MODES[mode]}"
    return None


# ---- one process: one workload in one mode ------------------------------------


def step_shapes(workload: str, steps: int, seed: int) -> list[tuple[int, ...]]:
    """The same shapes for every mode and process: drawn from a fixed seed."""
    r = random.Random(seed)
    if workload == "gpt2":
        return [(r.choice((4, 8, 12, 16)), r.choice((64, 128, 256, 384, 512, 768, 1024))) for _ in range(steps)]
    if workload == "resnet50":
        return [(r.choice((16, 32, 48, 64, 80, 96)),) for _ in range(steps)]
    if workload == "infer":
        return [(r.randint(1, 128),) for _ in range(steps)]
    raise SystemExit(f"unknown workload {workload!r}; valid: {', '.join(WORKLOADS)}")


def make_step(workload: str, torch):
    """The model and a function that runs one step for a shape."""
    device = torch.device("cuda")
    if workload == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel  # noqa: PLC0415

        model = GPT2LMHeadModel(GPT2Config(n_layer=8)).to(device)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        vocab = model.config.vocab_size

        def step(shape):
            batch, sequence = shape
            ids = torch.randint(0, vocab, (batch, sequence), device=device)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return step

    import torchvision  # noqa: PLC0415

    model = torchvision.models.resnet50(weights=None, num_classes=1000).to(device)
    if workload == "resnet50":
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        loss_fn = torch.nn.CrossEntropyLoss()

        def step(shape):
            (batch,) = shape
            x = torch.randn(batch, 3, 224, 224, device=device)
            y = torch.randint(0, 1000, (batch,), device=device)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return step

    model.eval()

    def step(shape):
        (batch,) = shape
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            x = torch.randn(batch, 3, 224, 224, device=device)
            model(x).float().softmax(dim=1).argmax(dim=1).cpu()

    return step


def stat(stats: dict, *keys: str, default=0):
    for k in keys:
        if k in stats:
            return stats[k]
    return default


def run_one(workload: str, mode: str, steps: int, warmup: int, seed: int, trace_path: str | None) -> dict:
    enable_allocator(mode)
    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: the workloads need a GPU")
    torch.manual_seed(seed)
    if trace_path is not None:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=4_000_000)
    shapes = step_shapes(workload, warmup + steps, seed)
    step = make_step(workload, torch)
    for shape in shapes[:warmup]:
        step(shape)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()
    times = []
    for shape in shapes[warmup:]:
        start = time.perf_counter()
        step(shape)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    after = torch.cuda.memory_stats()
    calls = stat(after, "allocation.all.allocated") - stat(before, "allocation.all.allocated")
    result = {
        "workload": workload,
        "mode": mode,
        "steps": steps,
        "warmup": warmup,
        "step_ms": [t * 1e3 for t in times],
        "median_step_ms": statistics.median(times) * 1e3,
        "peak_reserved": stat(after, "reserved_bytes.all.peak", default=torch.cuda.max_memory_reserved()),
        # What the program asked for (PyTorch's allocated bytes are rounded to 512 B blocks).
        "peak_requested": stat(after, "requested_bytes.all.peak", "allocated_bytes.all.peak",
                               default=torch.cuda.max_memory_allocated()),
        "peak_allocated": stat(after, "allocated_bytes.all.peak", default=torch.cuda.max_memory_allocated()),
        "allocations_per_step": calls / steps,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
    }
    result["peak_ratio"] = result["peak_reserved"] / result["peak_requested"] if result["peak_requested"] else 0.0
    if trace_path is not None:
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        result["trace"] = write_replay_trace(snapshot, trace_path, f"{workload}: {mode}, {warmup + steps} steps, seed {seed}")
    return result


# ---- PyTorch's trace to syncmem's replay format ---------------------------------


def replay_ops(snapshot: dict) -> tuple[list[tuple[bool, int, int]], dict]:
    """(allocate, slot, size) steps from a snapshot's device trace.

    An `alloc` allocates (its size is the caller's request); `free_requested`
    frees (the caller's deallocate; `free_completed` follows once the block's
    streams are done, and frees only what had no request). Frees of addresses
    allocated before recording began are dropped; what is live at the end is
    freed at the end."""
    traces = snapshot.get("device_traces", [])
    events = max(traces, key=len) if traces else []
    ops: list[tuple[bool, int, int]] = []
    live: dict[int, tuple[int, int]] = {}
    free_slots: list[int] = []
    slots = 0
    counts = {"alloc": 0, "free": 0, "dropped_frees": 0, "streams": set()}
    for e in events:
        action = e.get("action")
        addr = e.get("addr")
        if action == "alloc":
            if free_slots:
                slot = free_slots.pop()
            else:
                slot = slots
                slots += 1
            live[addr] = (slot, int(e["size"]))
            ops.append((True, slot, int(e["size"])))
            counts["alloc"] += 1
            counts["streams"].add(e.get("stream", 0))
        elif action in ("free_requested", "free_completed"):
            entry = live.pop(addr, None)
            if entry is None:
                if action == "free_requested":
                    counts["dropped_frees"] += 1
                continue
            ops.append((False, entry[0], entry[1]))
            free_slots.append(entry[0])
            counts["free"] += 1
    for slot, size in live.values():
        ops.append((False, slot, size))
    counts["streams"] = len(counts["streams"])
    counts["slots"] = slots
    return ops, counts


def write_replay_trace(snapshot: dict, path: str, description: str) -> dict:
    ops, counts = replay_ops(snapshot)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="ascii") as f:
        f.write(f"{REPLAY_FORMAT_LINE}\n# {description}\n")
        f.write(f"slots {counts['slots']} ops {len(ops)}\n")
        for allocate, slot, size in ops:
            f.write(f"+{slot} {size}\n" if allocate else f"-{slot}\n")
    live = peak = 0
    for allocate, _, size in ops:
        live = live + size if allocate else live - size
        peak = max(peak, live)
    counts.update(path=path, ops=len(ops), peak_requested=peak)
    return counts


# ---- the driver --------------------------------------------------------------


def worker_command(args, workload: str, mode: str, trace_path: str | None = None) -> list[str]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", workload, "--mode", mode,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--seed", str(args.seed)]
    if trace_path is not None:
        cmd += ["--trace-file", trace_path]
    return cmd


def run_worker(args, workload: str, mode: str, trace_path: str | None = None) -> dict:
    env = mode_environment(mode, syncmem_conf(mode))
    proc = subprocess.run(worker_command(args, workload, mode, trace_path), env=env,
                          capture_output=True, text=True, timeout=args.process_timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        error = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"workload": workload, "mode": mode, "error": f"exit {proc.returncode}: {error}"}
    return json.loads(lines[-1])


def summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[0]["error"] if runs else "not run"}
    medians = [r["median_step_ms"] for r in ok]
    return {
        "processes": len(ok),
        "median_step_ms": statistics.median(medians),
        "step_ms_min": min(medians),
        "step_ms_max": max(medians),
        "peak_reserved": statistics.median(r["peak_reserved"] for r in ok),
        "peak_requested": statistics.median(r["peak_requested"] for r in ok),
        "peak_ratio": statistics.median(r["peak_ratio"] for r in ok),
        "allocations_per_step": statistics.median(r["allocations_per_step"] for r in ok),
    }


def print_table(summary: dict[str, dict[str, dict]]) -> None:
    gib = float(1 << 30)
    print(f"{'workload':9} {'mode':22} {'step ms (median, min..max)':>28} {'reserved':>10} {'requested':>10} "
          f"{'ratio':>6} {'allocs/step':>11}")
    for workload, modes in summary.items():
        for mode, s in modes.items():
            if "error" in s:
                print(f"{workload:9} {mode:22} {s['error']}")
                continue
            step = f"{s['median_step_ms']:.1f} ({s['step_ms_min']:.1f}..{s['step_ms_max']:.1f})"
            print(f"{workload:9} {mode:22} {step:>28} {s['peak_reserved'] / gib:9.2f}G {s['peak_requested'] / gib:9.2f}G "
                  f"{s['peak_ratio']:6.3f} {s['allocations_per_step']:11.0f}")


def drive(args) -> int:
    workloads = choices(args.workloads, WORKLOADS, "--workloads")
    modes = choices(args.modes, ALL_MODES, "--modes")
    runs: dict[str, dict[str, list[dict]]] = {w: {m: [] for m in modes} for w in workloads}
    unavailable: dict[str, dict] = {}
    for round_ in range(args.processes):
        for w in workloads:
            # Alternate the order as well, so that no mode always runs first.
            order = modes if round_ % 2 == 0 else list(reversed(modes))
            for m in order:
                if m in unavailable:
                    if not runs[w][m]:
                        runs[w][m].append(unavailable[m] | {"workload": w})
                    continue
                r = run_worker(args, w, m)
                runs[w][m].append(r)
                if "error" in r:
                    print(f"  {w} {m}: {r['error']}", file=sys.stderr, flush=True)
                    if "syncmem.torch is not available" in r["error"]:
                        unavailable[m] = r
                else:
                    print(f"  round {round_ + 1} {w} {m}: {r['median_step_ms']:.1f} ms/step, "
                          f"ratio {r['peak_ratio']:.3f}", file=sys.stderr, flush=True)
    summary = {w: {m: summarize(runs[w][m]) for m in modes} for w in workloads}
    print_table(summary)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"summary": summary, "runs": runs, "processes": args.processes, "steps": args.steps,
                       "warmup": args.warmup, "seed": args.seed}, f, indent=1)
    # A worker that failed is in the table; the exit status says so too.
    return 1 if any("error" in r for ms in runs.values() for rs in ms.values() for r in rs) else 0


def record(args) -> int:
    failed = 0
    for w in args.workloads.split(","):
        path = os.path.join(args.record_trace, f"{w}.replay")
        r = run_worker(args, w, "torch-default", path)
        if "error" in r:
            print(f"{w}: {r['error']}", file=sys.stderr)
            failed += 1
            continue
        t = r["trace"]
        print(f"{w}: {t['ops']} ops, {t['slots']} slots, {t['streams']} stream(s), {t['dropped_frees']} frees of "
              f"earlier blocks dropped, peak requested {t['peak_requested'] / 2**20:.1f} MiB "
              f"(PyTorch: requested {r['peak_requested'] / 2**20:.1f} MiB, reserved {r['peak_reserved'] / 2**20:.1f} MiB, "
              f"ratio {r['peak_ratio']:.3f}) -> {path}")
    return 1 if failed else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ", ".join(WORKLOADS))
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(ALL_MODES))
    p.add_argument("--processes", type=int, default=3, help="processes per (workload, mode), at least 3 for a result")
    p.add_argument("--steps", type=int, default=30, help="timed steps per process")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--seed", type=int, default=29, help="the shapes' seed (the same in every process)")
    p.add_argument("--json", help="write the summary and every process's figures here")
    p.add_argument("--record-trace", metavar="DIR", help="record each workload's allocations (torch-default) into DIR")
    p.add_argument("--process-timeout", type=float, default=600)
    p.add_argument("--worker", metavar="WORKLOAD", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="torch-default", help=argparse.SUPPRESS)
    p.add_argument("--trace-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        if args.mode not in ALL_MODES:
            raise SystemExit(f"--mode: unknown {args.mode!r}; valid: {', '.join(ALL_MODES)}")
        print(json.dumps(run_one(args.worker, args.mode, args.steps, args.warmup, args.seed, args.trace_file)))
        return 0
    if args.record_trace:
        return record(args)
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
