#!/usr/bin/env python3
"""Loops under torch.compile(mode="reduce-overhead") (CUDA graph trees) in several allocator modes.

Workloads (GPT-2 from a config, weights from a fixed seed, float32 with TF32
off and dropout 0, so that every process computes the same numbers; no
network needed):
  gpt2-infer  transformers.GPT2LMHeadModel, 8 layers, eval and no_grad, the
              logits of a batch of 1, 2, 4, 8 or 16 sequences of 128 tokens
  gpt2-train  the same model training: forward, next-token loss and backward
              (compiled), AdamW step (eager), batch 4, 8 or 16 by 128
Each is compiled with mode="reduce-overhead" and dynamic=False, so that every
batch size is compiled and recorded as a graph of its own, all in the memory
pool the graph trees share. Every step begins with
torch.compiler.cudagraph_mark_step_begin().

Modes (each in a process of its own, set before CUDA is touched):
  torch-default      PyTorch's CUDA caching allocator
  torch-expandable   the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  syncmem-default    syncmem.torch.enable() before any CUDA allocation

A process runs --warmup rounds over every batch size (the graph trees run a
new graph once eagerly, record it the second time and replay it from the
third, so at least 2 rounds make the timed steps replays), then --steps timed
steps, their batch sizes drawn from a fixed seed; each step is timed from a
synchronized device to torch.cuda.synchronize() after it. The driver first
runs one process per workload that is not counted (--no-prime: none): it
compiles the model into Inductor's on-disk cache, which takes more time and
device memory than loading it. Then it runs --processes rounds, the modes
alternating process by process so that drift of the machine does not pick a
winner, and reports per workload and mode the median step time with its
spread (min..max of the processes' medians), the warm-up's seconds (compiling
from the cache, and recording) and, measured from the first warm-up step to
the last timed step:
  reserved   torch.cuda.max_memory_reserved(); res/alloc is its ratio to
             torch.cuda.max_memory_allocated(). syncmem's statistics leave
             CUDA graph pools out (docs/python.md), so under syncmem these
             cover the ordinary cache only: compare the next column.
  device     the most device memory in use (cudaMemGetInfo, read after every
             step) above what was in use before the model was made: the pools
             of every allocator, graph pools included
(each process's line also gives, from torch.cuda.memory_snapshot() after the
last step, the memory of the ordinary cache and of the graph pools apart)
and whether its outputs match torch-default's (the first torch-default process
that succeeded; the first listed mode's without one): the logits of a fixed
probe batch per batch size (256 values at fixed places, and the sum over the
vocabulary at the last position of each sequence) within rtol 1e-3 and atol
1e-3, and each step's loss within 1e-3 of it, relative. It exits non-zero if
a worker failed or an output differed.

  python3 bench/python/torch_compiled.py --smoke
  python3 bench/python/torch_compiled.py --processes 3 --json results.json

--smoke makes the model tiny (2 layers, 128 wide, 2048 tokens, sequences of
32, two batch sizes per workload) with 2 warm-up rounds, 6 steps and one
process per mode unless --warmup, --steps or --processes say otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time

from torch_modes import choices, enable_allocator, run_worker_process

MODES = ("torch-default", "torch-expandable", "syncmem-default")
WORKLOADS = ("gpt2-infer", "gpt2-train")
SCALES = {
    "full": {"config": {"n_layer": 8}, "sequence": 128,
             "batches": {"gpt2-infer": (1, 2, 4, 8, 16), "gpt2-train": (4, 8, 16)}},
    "smoke": {"config": {"n_layer": 2, "n_embd": 128, "n_head": 4, "vocab_size": 2048, "n_positions": 64},
              "sequence": 32, "batches": {"gpt2-infer": (1, 2), "gpt2-train": (2, 4)}},
}
TOLERANCE = {"gpt2-infer": (1e-3, 1e-3), "gpt2-train": (1e-3, 0.0)}  # (rtol, atol)
PROBE_SAMPLES = 256


# ---- one process: one workload in one mode ------------------------------------


def schedule(batches: tuple[int, ...], warmup: int, steps: int, seed: int) -> tuple[list[int], list[int]]:
    """Warm-up rounds over every batch size, then the timed steps' sizes: the
    same in every mode and process."""
    r = random.Random(seed)
    rounds = []
    for _ in range(warmup):
        order = list(batches)
        r.shuffle(order)
        rounds += order
    return rounds, [r.choice(batches) for _ in range(steps)]


def make_model(workload: str, scale: dict, seed: int, torch):
    """The compiled module, for training its optimizer (None for inference), and the vocabulary's size."""
    from transformers import GPT2Config, GPT2LMHeadModel  # noqa: PLC0415

    config = GPT2Config(**scale["config"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    torch.manual_seed(seed)  # the weights are drawn on the host: identical in every process
    lm = GPT2LMHeadModel(config).to(torch.device("cuda"))

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, ids):
            return self.lm(input_ids=ids, use_cache=False).logits

    class NextTokenLoss(Logits):
        def forward(self, ids):
            logits = self.lm(input_ids=ids, use_cache=False).logits
            return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)),
                                                     ids[:, 1:].reshape(-1))

    if workload == "gpt2-infer":
        lm.eval().requires_grad_(False)
        return torch.compile(Logits(), mode="reduce-overhead", dynamic=False), None, config.vocab_size
    lm.train()
    optimizer = torch.optim.AdamW(lm.parameters(), lr=1e-4)
    return torch.compile(NextTokenLoss(), mode="reduce-overhead", dynamic=False), optimizer, config.vocab_size


def make_ids(torch, generator, vocab: int, batch: int, sequence: int):
    return torch.randint(0, vocab, (batch, sequence), generator=generator).to(torch.device("cuda"))


def probe_fingerprint(model, torch, vocab: int, batches: tuple[int, ...], sequence: int, seed: int) -> dict:
    """Per batch size, values of the logits of a fixed batch."""
    generator = torch.Generator().manual_seed(seed + 1)
    out = {}
    for batch in batches:
        ids = make_ids(torch, generator, vocab, batch, sequence)
        places = torch.randint(0, batch * sequence * vocab, (PROBE_SAMPLES,), generator=generator)
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            logits = model(ids)
            out[f"b{batch}.sample"] = logits.reshape(-1)[places.to(logits.device)].tolist()
            out[f"b{batch}.last_sum"] = logits[:, -1, :].sum(dim=-1).tolist()
        del logits
    return out


def counter_total(group: str, key: str | None = None) -> int:
    try:
        from torch._dynamo.utils import counters  # noqa: PLC0415
    except ImportError:
        return -1
    values = counters.get(group, {})
    return int(values.get(key, 0)) if key is not None else int(sum(values.values()))


def run_one(workload: str, mode: str, scale_name: str, steps: int, warmup: int, seed: int) -> dict:
    enable_allocator(mode)
    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: the workloads need a GPU")
    import torch._dynamo  # noqa: PLC0415

    torch.set_float32_matmul_precision("highest")  # no TF32: every process computes the same logits
    dynamo = torch._dynamo.config
    setattr(dynamo, "recompile_limit" if hasattr(dynamo, "recompile_limit") else "cache_size_limit", 64)
    scale = SCALES[scale_name]
    batches, sequence = scale["batches"][workload], scale["sequence"]
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    used_before = total - free

    model, optimizer, vocab = make_model(workload, scale, seed, torch)
    warm_sizes, timed_sizes = schedule(batches, warmup, steps, seed)
    generator = torch.Generator().manual_seed(seed)
    inputs = [make_ids(torch, generator, vocab, b, sequence) for b in warm_sizes + timed_sizes]

    def step(ids):
        torch.compiler.cudagraph_mark_step_begin()
        if optimizer is None:
            with torch.no_grad():
                return model(ids)
        loss = model(ids)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    losses, device_used = [], []

    def timed_step(ids) -> float:
        start = time.perf_counter()
        out = step(ids)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        if optimizer is not None:
            losses.append(out.item())  # now: the next step's graphs reuse its memory
        free, total = torch.cuda.mem_get_info()
        device_used.append(total - free - used_before)
        return elapsed

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for ids in inputs[:len(warm_sizes)]:
        timed_step(ids)
    warmup_s = time.perf_counter() - start
    times = [timed_step(ids) for ids in inputs[len(warm_sizes):]]
    peak_reserved = torch.cuda.max_memory_reserved()
    peak_allocated = torch.cuda.max_memory_allocated()
    # Where the memory is at the end, graph pools apart (they never shrink):
    # what tells a graph pool's layout from the ordinary cache's.
    pools: dict[str, dict[str, int]] = {}
    for segment in torch.cuda.memory_snapshot():
        kind = "ordinary" if tuple(segment["segment_pool_id"]) == (0, 0) else "graph"
        entry = pools.setdefault(kind, {"segments": 0, "reserved": 0, "allocated": 0})
        entry["segments"] += 1
        entry["reserved"] += segment["total_size"]
        entry["allocated"] += segment["allocated_size"]
    if optimizer is None:
        fingerprint = probe_fingerprint(model, torch, vocab, batches, sequence, seed)
    else:
        fingerprint = {"loss": losses}
    return {
        "workload": workload,
        "mode": mode,
        "scale": scale_name,
        "steps": steps,
        "warmup_rounds": warmup,
        "batches": list(batches),
        "sequence": sequence,
        "step_ms": [t * 1e3 for t in times],
        "median_step_ms": statistics.median(times) * 1e3 if times else math.nan,
        "warmup_s": warmup_s,
        "peak_reserved": peak_reserved,
        "peak_allocated": peak_allocated,
        "peak_ratio": peak_reserved / peak_allocated if peak_allocated else 0.0,
        "device_peak": max(device_used),
        "pools_at_end": pools,
        "compiled_graphs": counter_total("stats", "unique_graphs"),
        "graph_breaks": counter_total("graph_break"),
        "cudagraph_skips": counter_total("inductor", "cudagraph_skips"),
        "fingerprint": fingerprint,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
    }


# ---- the driver --------------------------------------------------------------


def run_worker(args, workload: str, mode: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", workload, "--mode", mode, "--scale", args.scale,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--seed", str(args.seed)]
    return run_worker_process(cmd, mode, args.process_timeout, {"workload": workload, "mode": mode})


def compare(reference: dict, other: dict, rtol: float, atol: float) -> tuple[bool, float]:
    """Whether every value is within atol + rtol * |reference|, and the largest difference."""
    match, worst = True, 0.0
    for key, expected in reference.items():
        got = other.get(key)
        if got is None or len(got) != len(expected):
            return False, math.inf
        for a, b in zip(got, expected):
            diff = abs(a - b)
            worst = max(worst, diff) if not math.isnan(diff) else math.inf
            if not diff <= atol + rtol * abs(b):
                match = False
    return match, worst


def summarize(runs: list[dict], reference: dict | None, tolerance: tuple[float, float]) -> dict:
    ok = [r for r in runs if "error" not in r]
    failures = [f"{r['error']}\n{r.get('stderr', '')}" for r in runs if "error" in r]
    if not ok:
        return {"error": failures[0] if failures else "not run", "failures": len(failures)}
    medians = [r["median_step_ms"] for r in ok]
    s = {
        "processes": len(ok),
        "failures": len(failures),
        "median_step_ms": statistics.median(medians),
        "step_ms_min": min(medians),
        "step_ms_max": max(medians),
        "warmup_s": statistics.median(r["warmup_s"] for r in ok),
        "peak_reserved": statistics.median(r["peak_reserved"] for r in ok),
        "peak_allocated": statistics.median(r["peak_allocated"] for r in ok),
        "peak_ratio": statistics.median(r["peak_ratio"] for r in ok),
        "device_peak": statistics.median(r["device_peak"] for r in ok),
        "cudagraph_skips": max(r["cudagraph_skips"] for r in ok),
        "graph_breaks": max(r["graph_breaks"] for r in ok),
    }
    if reference is None:
        s.update(outputs_match=False, max_diff=math.inf)
    else:
        checks = [compare(reference["fingerprint"], r["fingerprint"], *tolerance) for r in ok]
        s.update(outputs_match=all(c[0] for c in checks), max_diff=max(c[1] for c in checks))
    return s


def print_table(summary: dict[str, dict[str, dict]], references: dict[str, str | None]) -> None:
    mib = float(1 << 20)
    print(f"{'workload':10} {'mode':17} {'step ms (median, min..max)':>27} {'warm-up s':>9} {'reserved':>10} "
          f"{'res/alloc':>9} {'device':>10}  outputs match")
    for workload, modes in summary.items():
        for mode, s in modes.items():
            if "error" in s:
                print(f"{workload:10} {mode:17} failed: {s['error'].splitlines()[0]}")
                continue
            step = f"{s['median_step_ms']:.2f} ({s['step_ms_min']:.2f}..{s['step_ms_max']:.2f})"
            match = "yes" if s["outputs_match"] else "no"
            notes = f" [{s['failures']} failed]" if s["failures"] else ""
            if s["cudagraph_skips"]:
                notes += f" [cudagraphs skipped {s['cudagraph_skips']}x]"
            print(f"{workload:10} {mode:17} {step:>27} {s['warmup_s']:9.1f} {s['peak_reserved'] / mib:7.0f}MiB "
                  f"{s['peak_ratio']:9.3f} {s['device_peak'] / mib:7.0f}MiB  {match} ({s['max_diff']:.2e}){notes}")
        print(f"{'':10} outputs compared with {references[workload] or 'nothing (no process succeeded)'}")


def print_failures(runs: dict[str, dict[str, list[dict]]]) -> None:
    for workload, modes in runs.items():
        for mode, rs in modes.items():
            for i, r in enumerate(rs):
                if "error" in r:
                    print(f"\n{workload} {mode}, process {i + 1} failed: {r['error']}; the end of its stderr:")
                    print("    " + r["stderr"].replace("\n", "\n    "))


def drive(args) -> int:
    workloads = choices(args.workloads, WORKLOADS, "--workloads")
    modes = choices(args.modes, MODES, "--modes")
    runs: dict[str, dict[str, list[dict]]] = {w: {m: [] for m in modes} for w in workloads}
    unavailable: dict[str, dict] = {}
    primed: dict[str, dict] = {}
    if args.prime:
        # The first process compiles the model into Inductor's on-disk cache,
        # taking more memory and time than the processes after it: not counted.
        for w in workloads:
            r = primed[w] = run_worker(args, w, modes[0])
            outcome = r.get("error") or f"device {r['device_peak'] / 2**20:.0f} MiB, warm-up {r['warmup_s']:.1f} s"
            print(f"  priming {w} {modes[0]} (not counted): {outcome}", file=sys.stderr, flush=True)
    for round_ in range(args.processes):
        for w in workloads:
            order = modes if round_ % 2 == 0 else list(reversed(modes))
            for m in order:
                if m in unavailable:  # reported once, not run again
                    continue
                r = run_worker(args, w, m)
                runs[w][m].append(r)
                if "error" in r:
                    print(f"  round {round_ + 1} {w} {m}: failed, {r['error']}\n{r['stderr']}", file=sys.stderr,
                          flush=True)
                    if "syncmem.torch is not available" in r["stderr"]:
                        unavailable[m] = r
                else:
                    pools = ", ".join(f"{kind} {p['reserved'] / 2**20:.0f} MiB in {p['segments']}"
                                      for kind, p in sorted(r.get("pools_at_end", {}).items()))
                    print(f"  round {round_ + 1} {w} {m}: {r['median_step_ms']:.2f} ms/step, warm-up "
                          f"{r['warmup_s']:.1f} s, device {r['device_peak'] / 2**20:.0f} MiB (at the end: {pools})",
                          file=sys.stderr, flush=True)
    summary: dict[str, dict[str, dict]] = {}
    references: dict[str, str | None] = {}
    for w in workloads:
        reference, references[w] = None, None
        for m in ("torch-default", *modes):
            good = [r for r in runs[w].get(m, []) if "error" not in r]
            if good:
                reference, references[w] = good[0], f"{m}'s first process"
                break
        summary[w] = {m: summarize(runs[w][m], reference, TOLERANCE[w]) for m in modes}
    print_table(summary, references)
    print_failures(runs)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"summary": summary, "references": references, "runs": runs, "primed": primed,
                       "processes": args.processes,
                       "scale": args.scale, "steps": args.steps, "warmup_rounds": args.warmup, "seed": args.seed,
                       "tolerance": TOLERANCE}, f, indent=1)
    failed = any("error" in r for w in runs.values() for rs in w.values() for r in rs)
    mismatched = any(not s.get("outputs_match", False) for w in summary.values() for s in w.values())
    return 1 if failed or mismatched else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ", ".join(WORKLOADS))
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    p.add_argument("--processes", type=int, help="processes per (workload, mode), alternating (3; 1 with --smoke)")
    p.add_argument("--steps", type=int, help="timed steps per process (40; 6 with --smoke)")
    p.add_argument("--warmup", type=int, help="untimed rounds over every batch size first (3; 2 with --smoke)")
    p.add_argument("--seed", type=int, default=61, help="weights, data and batch sizes (the same in every process)")
    p.add_argument("--smoke", action="store_true", help="a tiny model and few steps: checks that it runs end to end")
    p.add_argument("--json", help="write the summary and every process's figures here")
    p.add_argument("--process-timeout", type=float, default=900, help="seconds a worker may take")
    p.add_argument("--prime", action=argparse.BooleanOptionalAction, default=None,
                   help="first run one uncounted process per workload that fills Inductor's cache (default: on, "
                        "off with --smoke)")
    p.add_argument("--worker", metavar="WORKLOAD", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="torch-default", help=argparse.SUPPRESS)
    p.add_argument("--scale", choices=tuple(SCALES), help=argparse.SUPPRESS)
    args = p.parse_args()
    smoke = args.smoke or args.scale == "smoke"
    args.scale = "smoke" if smoke else "full"
    for name, full, small in (("processes", 3, 1), ("steps", 40, 6), ("warmup", 3, 2), ("prime", True, False)):
        if getattr(args, name) is None:
            setattr(args, name, small if smoke else full)
    if args.worker:
        if args.worker not in WORKLOADS or args.mode not in MODES:
            raise SystemExit(f"--worker {args.worker} --mode {args.mode}: valid are {WORKLOADS} and {MODES}")
        print(json.dumps(run_one(args.worker, args.mode, args.scale, args.steps, args.warmup, args.seed)))
        return 0
    if args.processes < 1 or args.steps < 1 or args.warmup < 0:
        raise SystemExit("--processes and --steps must be at least 1, --warmup at least 0")
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
