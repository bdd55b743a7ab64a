#!/usr/bin/env python3
"""The largest training batch that runs in a fixed memory cap, per allocator mode.

What a user feels of an allocator's fragmentation is whether the model fits.
Under a cap set with torch.cuda.set_per_process_memory_fraction (--cap-gib,
16 by default), each worker process finds by bisection the largest batch with
which --tries-steps training steps in a row run without running out of memory:
it doubles the batch from --start until a try fails, then halves the interval
between the last batch that ran and the first that did not. Between tries the
gradients are dropped and the cache emptied, so that each try starts from the
model and the optimizer's state alone. Then it times --steps steps at the
largest batch, and runs the first batch that did not fit without the cap, to
report the peak of the bytes it asks for: past the cap, no allocator fits it.

Workloads (bf16 autocast, AdamW; weights from a fixed seed):
  gpt2      transformers.GPT2LMHeadModel, 8 layers, sequences of 1024 tokens
  resnet50  torchvision.models.resnet50, 224x224 images

Modes (each in a process of its own, set before CUDA is touched):
  torch-default      PyTorch's CUDA caching allocator
  torch-expandable   the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  syncmem-default    syncmem.torch.enable() before any CUDA allocation

The driver runs --processes rounds, the modes alternating process by process,
and reports per workload and mode the largest batch (median, min..max of the
processes), the tokens or images per step it makes, the median step time at
it with its spread, and the peak reserved memory. It exits non-zero if a
worker failed other than by running out of memory.

  python3 bench/python/torch_fit.py --processes 3 --json results.json
  python3 bench/python/torch_fit.py --smoke      # a tiny model under a 1 GiB cap
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from torch_modes import choices, enable_allocator, run_worker_process

WORKLOADS = ("gpt2", "resnet50")
MODES = ("torch-default", "torch-expandable", "syncmem-default")
SEQUENCE = {"full": 1024, "smoke": 128}
START = {"gpt2": 4, "resnet50": 64}
LARGEST = 1 << 14  # a batch this large ends the doubling, fitting or not


# ---- one process: one workload in one mode ------------------------------------


def make_model(workload: str, scale: str, torch):
    """The model, and a function that runs one training step for a batch."""
    device = torch.device("cuda")
    if workload == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel  # noqa: PLC0415

        config = GPT2Config(n_layer=8) if scale == "full" else GPT2Config(n_layer=2, n_embd=128, n_head=2,
                                                                            vocab_size=2048)
        model = GPT2LMHeadModel(config).to(device)
        sequence = SEQUENCE[scale]

        def inputs(batch):
            ids = torch.randint(0, config.vocab_size, (batch, sequence), device=device)
            return {"input_ids": ids, "labels": ids}

        def loss_of(batch_inputs):
            return model(**batch_inputs).loss

        per_item = sequence
    else:
        import torchvision  # noqa: PLC0415

        side = 224 if scale == "full" else 64
        model = torchvision.models.resnet50(weights=None, num_classes=1000).to(device)
        loss_fn = torch.nn.CrossEntropyLoss()

        def inputs(batch):
            return {"x": torch.randn(batch, 3, side, side, device=device),
                    "y": torch.randint(0, 1000, (batch,), device=device)}

        def loss_of(batch_inputs):
            return loss_fn(model(batch_inputs["x"]), batch_inputs["y"])

        per_item = 1
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(batch: int) -> None:
        batch_inputs = inputs(batch)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_of(batch_inputs)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def reset() -> None:
        # A step that ran out of memory may leave gradients behind.
        for p in model.parameters():
            p.grad = None

    return step, reset, per_item


def run_one(workload: str, mode: str, scale: str, cap_gib: float, tries_steps: int, steps: int, seed: int) -> dict:
    enable_allocator(mode)
    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: the workloads need a GPU")
    torch.manual_seed(seed)
    total = torch.cuda.get_device_properties(0).total_memory
    cap = int(cap_gib * (1 << 30))
    if cap >= total:
        raise SystemExit(f"--cap-gib {cap_gib}: the device has only {total / (1 << 30):.1f} GiB")
    torch.cuda.set_per_process_memory_fraction(cap / total)
    step, reset, per_item = make_model(workload, scale, torch)
    tried: list[tuple[int, bool]] = []

    def fits(batch: int) -> bool:
        ok = True
        try:
            for _ in range(tries_steps):
                step(batch)
            torch.cuda.synchronize()
        except torch.OutOfMemoryError:
            ok = False
        reset()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        tried.append((batch, ok))
        return ok

    good, bad = 0, None
    batch = START[workload] if scale == "full" else 2
    while batch <= LARGEST:
        if not fits(batch):
            bad = batch
            break
        good, batch = batch, batch * 2
    if bad is None:
        bad = LARGEST + 1
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    times = []
    timing_oom = False
    if good > 0:
        torch.cuda.reset_peak_memory_stats()
        try:
            step(good)  # the cache fills again after the last try emptied it
            for _ in range(steps):
                start = time.perf_counter()
                step(good)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
        except torch.OutOfMemoryError:
            timing_oom = True  # the batch ran --tries-steps steps, not this many
    peak_reserved = torch.cuda.max_memory_reserved()
    peak_requested = torch.cuda.memory_stats().get("requested_bytes.all.peak", 0)
    # What the first batch that did not fit asks for at its peak, without the
    # cap: over the cap, no allocator could have run it.
    next_requested = 0
    if bad <= LARGEST:
        reset()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.reset_peak_memory_stats()
        try:
            for _ in range(tries_steps):
                step(bad)
            torch.cuda.synchronize()
            next_requested = torch.cuda.memory_stats().get("requested_bytes.all.peak", 0)
        except torch.OutOfMemoryError:
            next_requested = -1  # more than the whole device
    return {
        "workload": workload,
        "mode": mode,
        "cap_bytes": cap,
        "largest_batch": good,
        "items_per_step": good * per_item,
        "tries": tried,
        "timing_oom": timing_oom,
        "step_ms": [t * 1e3 for t in times],
        "median_step_ms": statistics.median(times) * 1e3 if times else 0.0,
        "peak_reserved": peak_reserved,
        "peak_requested": peak_requested,
        "next_batch": bad,
        "next_peak_requested": next_requested,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
    }


# ---- the driver -----------------------------------------------------------------


def run_worker(args, workload: str, mode: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", workload, "--mode", mode, "--scale", args.scale,
           "--cap-gib", str(args.cap_gib), "--tries-steps", str(args.tries_steps), "--steps", str(args.steps),
           "--seed", str(args.seed)]
    return run_worker_process(cmd, mode, args.process_timeout, {"workload": workload, "mode": mode})


def summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[0]["error"] if runs else "not run", "failures": len(runs)}
    largest = [r["largest_batch"] for r in ok]
    medians = [r["median_step_ms"] for r in ok]
    return {
        "processes": len(ok),
        "failures": len(runs) - len(ok),
        "largest_batch": statistics.median(largest),
        "largest_min": min(largest),
        "largest_max": max(largest),
        "items_per_step": statistics.median(r["items_per_step"] for r in ok),
        "median_step_ms": statistics.median(medians),
        "step_ms_min": min(medians),
        "step_ms_max": max(medians),
        "peak_reserved": statistics.median(r["peak_reserved"] for r in ok),
        "timing_ooms": sum(1 for r in ok if r["timing_oom"]),
        "peak_requested": statistics.median(r["peak_requested"] for r in ok),
        "next_batch": statistics.median(r["next_batch"] for r in ok),
        "next_peak_requested": statistics.median(r["next_peak_requested"] for r in ok),
    }


def print_table(summary: dict[str, dict[str, dict]], cap_gib: float) -> None:
    print(f"cap {cap_gib:g} GiB (set_per_process_memory_fraction)")
    print(f"{'workload':9} {'mode':17} {'largest batch (min..max)':>25} {'items/step':>10} "
          f"{'step ms at it (min..max)':>26} {'reserved':>10} {'requested':>10} {'next needs':>16}")
    for workload, modes in summary.items():
        for mode, s in modes.items():
            if "error" in s:
                print(f"{workload:9} {mode:17} failed: {s['error']}")
                continue
            largest = f"{s['largest_batch']:g} ({s['largest_min']}..{s['largest_max']})"
            largest += "*" * (s["timing_ooms"] > 0)
            step = f"{s['median_step_ms']:.1f} ({s['step_ms_min']:.1f}..{s['step_ms_max']:.1f})"
            needs = s["next_peak_requested"]
            needs = "over the device" if needs < 0 else f"{needs / (1 << 20):.0f}MiB"
            print(f"{workload:9} {mode:17} {largest:>25} {s['items_per_step']:>10g} {step:>26} "
                  f"{s['peak_reserved'] / (1 << 20):7.0f}MiB {s['peak_requested'] / (1 << 20):7.0f}MiB "
                  f"{needs:>9} at {s['next_batch']:g}")
    print("requested: the peak of the bytes asked for at the largest batch; next needs: the same for the first "
          "batch that did not fit, run without the cap (over the cap, no allocator could run it)")
    if any(s.get("timing_ooms") for modes in summary.values() for s in modes.values()):
        print("*: ran out of memory in the timed steps at that batch, after its tries had run (in as many processes as "
              "timing_ooms in the JSON says)")


def drive(args) -> int:
    workloads = choices(args.workloads, WORKLOADS, "--workloads")
    modes = choices(args.modes, MODES, "--modes")
    runs: dict[str, dict[str, list[dict]]] = {w: {m: [] for m in modes} for w in workloads}
    for round_ in range(args.processes):
        for w in workloads:
            for m in modes if round_ % 2 == 0 else list(reversed(modes)):
                r = run_worker(args, w, m)
                runs[w][m].append(r)
                if "error" in r:
                    print(f"  round {round_ + 1} {w} {m}: failed, {r['error']}\n{r['stderr']}", file=sys.stderr,
                          flush=True)
                else:
                    print(f"  round {round_ + 1} {w} {m}: largest batch {r['largest_batch']}, "
                          f"{r['median_step_ms']:.1f} ms/step at it, {len(r['tries'])} tries", file=sys.stderr,
                          flush=True)
    summary = {w: {m: summarize(runs[w][m]) for m in modes} for w in workloads}
    print_table(summary, args.cap_gib)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"summary": summary, "runs": runs, "cap_gib": args.cap_gib, "processes": args.processes,
                       "scale": args.scale, "tries_steps": args.tries_steps, "steps": args.steps,
                       "seed": args.seed}, f, indent=1)
    return 1 if any("error" in r for w in runs.values() for rs in w.values() for r in rs) else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ", ".join(WORKLOADS))
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    p.add_argument("--cap-gib", type=float, help="the memory cap (16; 1 with --smoke)")
    p.add_argument("--processes", type=int, help="processes per (workload, mode), alternating (3; 1 with --smoke)")
    p.add_argument("--tries-steps", type=int, default=4, help="steps a batch must run to fit")
    p.add_argument("--steps", type=int, help="timed steps at the largest batch (10; 3 with --smoke)")
    p.add_argument("--seed", type=int, default=62)
    p.add_argument("--smoke", action="store_true", help="a tiny model: checks that it runs end to end")
    p.add_argument("--json", help="write the summary and every process's figures here")
    p.add_argument("--process-timeout", type=float, default=900, help="seconds a worker may take")
    p.add_argument("--report", metavar="JSON", help="print the table of a saved --json run again, and exit")
    p.add_argument("--worker", metavar="WORKLOAD", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="torch-default", help=argparse.SUPPRESS)
    p.add_argument("--scale", choices=tuple(SEQUENCE), help=argparse.SUPPRESS)
    args = p.parse_args()
    smoke = args.smoke or args.scale == "smoke"
    args.scale = "smoke" if smoke else "full"
    for name, full, small in (("processes", 3, 1), ("steps", 10, 3), ("cap_gib", 16.0, 1.0)):
        if getattr(args, name) is None:
            setattr(args, name, small if smoke else full)
    if args.report:
        with open(args.report, encoding="utf-8") as f:
            saved = json.load(f)
        print_table({w: {m: summarize(rs) for m, rs in modes.items()} for w, modes in saved["runs"].items()},
                    saved["cap_gib"])
        return 0
    if args.worker:
        if args.worker not in WORKLOADS or args.mode not in MODES:
            raise SystemExit(f"--worker {args.worker} --mode {args.mode}: valid are {WORKLOADS} and {MODES}")
        print(json.dumps(run_one(args.worker, args.mode, args.scale, args.cap_gib, args.tries_steps, args.steps,
                                 args.seed)))
        return 0
    if args.processes < 1 or args.steps < 1 or args.tries_steps < 1 or args.cap_gib <= 0:
        raise SystemExit("--processes, --steps and --tries-steps must be at least 1, --cap-gib positive")
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
