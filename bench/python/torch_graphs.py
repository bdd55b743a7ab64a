#!/usr/bin/env python3
"""CUDA graphs captured by PyTorch, on PyTorch's graph pools and on syncmem's.

Each step is captured with torch.cuda.graph and replayed; what is measured is
the replay time per launch and the device memory the graph holds (the drop of
cudaMemGetInfo's free bytes from before the capture to after it, the ordinary
cache emptied on both sides), in two modes, each in a process of its own:

  torch-default    PyTorch's caching allocator and its graph private pools
  syncmem-default  syncmem.torch.enable(): syncmem's graph pools

Steps:
  chain-<size>  eight elementwise ops on a float32 tensor of <size>, each
                allocating its output while the previous one is freed, so
                the pool may reuse blocks inside the capture
  mlp           a 4-layer MLP forward (4096 wide, batch 64, bf16): cuBLAS
                kernels and their allocations

The modes alternate process by process (--processes each) so that drift of
the machine does not pick a winner; medians with min..max over processes.

  python3 bench/python/torch_graphs.py --processes 3 --json results.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

MODES = ("torch-default", "syncmem-default")
CHAIN_SIZES = {"64KiB": 64 << 10, "1MiB": 1 << 20, "16MiB": 16 << 20}
STEPS = tuple(f"chain-{name}" for name in CHAIN_SIZES) + ("mlp",)


def worker(mode: str, launches: int, repeats: int) -> dict:
    import torch

    if mode == "syncmem-default":
        import syncmem.torch

        syncmem.torch.enable()
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(30)
    results = {}
    for step in STEPS:
        if step == "mlp":
            weights = [torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16, generator=gen) / 64 for _ in range(4)]
            x = torch.randn(64, 4096, device=dev, dtype=torch.bfloat16, generator=gen)

            def run(x=x, weights=weights):
                h = x
                for w in weights:
                    h = torch.relu(h @ w)
                return h
        else:
            x = torch.randn(CHAIN_SIZES[step.split("-", 1)[1]] // 4, device=dev, generator=gen)

            def run(x=x):
                y = x
                for i in range(8):
                    y = y * 1.0001 + i
                return y

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                run()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        free_before = torch.cuda.mem_get_info()[0]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        held = free_before - torch.cuda.mem_get_info()[0]
        expected = run()
        graph.replay()
        torch.cuda.synchronize()
        if step == "mlp":  # cuBLAS may pick another kernel inside a capture: close, not equal
            torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2)
        else:
            assert torch.equal(out, expected), f"{step}: the replay differs from the eager step"
        for _ in range(20):
            graph.replay()
        per_launch = []
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(repeats):
            start.record()
            for _ in range(launches):
                graph.replay()
            end.record()
            end.synchronize()
            per_launch.append(start.elapsed_time(end) * 1000.0 / launches)
        results[step] = {"replay_us": statistics.median(per_launch), "held_bytes": held}
        del graph, out, expected
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return results


def drive(args) -> int:
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    for round_index in range(args.processes):
        order = MODES if round_index % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            cmd = [sys.executable, __file__, "--worker", mode, "--launches", str(args.launches),
                   "--repeats", str(args.repeats)]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.process_timeout)
            if done.returncode != 0:
                sys.stderr.write(done.stdout + done.stderr)
                print(f"torch_graphs: {mode} failed (exit {done.returncode})", file=sys.stderr)
                return 1
            runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    summary: dict[str, dict[str, dict]] = {}
    print(f"{'step':<14} {'mode':<16} {'replay us (median, min..max)':>30} {'held MiB':>10}")
    for step in STEPS:
        summary[step] = {}
        for mode in MODES:
            times = [r[step]["replay_us"] for r in runs[mode]]
            held = [r[step]["held_bytes"] for r in runs[mode]]
            summary[step][mode] = {
                "replay_us_median": statistics.median(times),
                "replay_us_min": min(times),
                "replay_us_max": max(times),
                "held_bytes_median": statistics.median(held),
            }
            s = summary[step][mode]
            spread = f"{s['replay_us_median']:.2f} ({s['replay_us_min']:.2f}..{s['replay_us_max']:.2f})"
            print(f"{step:<14} {mode:<16} {spread:>30} {s['held_bytes_median'] / (1 << 20):>10.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "runs": runs, "launches": args.launches, "repeats": args.repeats}, f,
                      indent=1)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--processes", type=int, default=3, help="processes per mode, alternating")
    p.add_argument("--launches", type=int, default=200, help="replays per timed repeat")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per process (their median is kept)")
    p.add_argument("--json", help="write the summary and every process's figures here")
    p.add_argument("--process-timeout", type=float, default=300)
    p.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.launches, args.repeats)))
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
