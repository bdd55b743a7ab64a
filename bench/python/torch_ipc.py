#!/usr/bin/env python3
"""Sharing a CUDA tensor with another process: export, import, first access,
close, beside PyTorch's own CUDA IPC in the same run.

Modes (each in a parent and a child process of its own, set before CUDA is
touched; the child is started with multiprocessing's spawn and kept for the
whole process):
  pytorch             PyTorch's CUDA caching allocator (PYTORCH_CUDA_ALLOC_CONF unset)
  pytorch-expandable  the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  syncmem             syncmem.torch.enable() right after `import torch`, plain
                      segments (SYNCMEM_ALLOC_CONF=expandable:0): 'c' handles,
                      cudaIpcGetMemHandle of the segment
  syncmem-growable    the same with syncmem.torch's default (its growable range):
                      's' handles of syncmem::ipc, the block's pages as file
                      descriptors
  syncmem-growable-20mb  the same with 20 MiB pages (SYNCMEM_ALLOC_CONF=
                      expandable_page_mb:20), the size of PyTorch's expandable
                      segments' pages: a 64 MiB block is 4 pages, not 32
  syncmem-tensor      a syncmem.tensor sent through syncmem's own multiprocessing
                      reducer (syncmem::ipc on plain segments); the child reads it
                      through torch.from_dlpack, whose conversion is counted in
                      the first access

One share, per mode and size, repeated --iters times after --warmup untimed ones:
  the parent makes a NEW int32 tensor of the size and fills it with random bits
  export        torch.multiprocessing.reductions.reduce_tensor(t) in the parent
                (its event, shareIpcHandle / cudaIpcGetMemHandle, the reference
                counter); syncmem-tensor: syncmem's reducer (ipc::export_synced)
  (the reduction is pickled with ForkingPickler, as multiprocessing does, and
  sent over a Pipe with the values at 16 sampled positions and the sum of all
  elements)
  import        pickle.loads in the child: the rebuild function opens the handle
  first access  the 16 sampled elements gathered on the device and copied back
                (x[index].tolist(), which synchronizes); then, untimed, they
                and the sum of all elements are checked against the parent's
  close         `del x` in the child, the tensor's last reference: PyTorch's
                deleter (a stream synchronisation, the reference counter) and
                the handle's close; the child checks, untimed, that its storage
                is gone (so the next share opens its handle again)
  release       the parent's `del t` after the child has answered
                (syncmem-tensor: and syncmem.ipc_collect(), which gives the
                export back); the parent checks, untimed, that the memory came
                back to its allocator

A new tensor per share, freed once the child has closed it, so that every
import really opens a handle: a child that still held the storage would find it
in PyTorch's caches (the storage by handle in Python, the mapping by handle in
the allocator). The caching allocators usually hand the freed block back for
the next tensor, so consecutive shares are of the same address ('addresses' in
the table counts the distinct ones among a process's timed shares).

The driver runs every mode in --rounds process pairs, the modes alternating
(reversed every other round) so that drift of the machine does not pick a
winner, and reports per size and mode the median over rounds of each round's
median in microseconds, with the spread (min..max of the rounds' medians). A
mode or size that fails shows its error in its cell; the run goes on.

  python3 bench/python/torch_ipc.py --rounds 5 --json torch_ipc.json

Without a CUDA device it says so and measures nothing; `--modes
syncmem-tensor-emulated` runs the same processes and tables on an emulated
device (syncmem and numpy only), to check the script itself.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import pickle
import random
import re
import statistics
import subprocess
import sys
import time

MODES = {  # mode: (how it shares, environment over the caller's, the two allocator variables unset)
    "pytorch": ("torch", {}),
    "pytorch-expandable": ("torch", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    "syncmem": ("torch", {"SYNCMEM_ALLOC_CONF": "expandable:0"}),
    "syncmem-growable": ("torch", {}),
    "syncmem-growable-20mb": ("torch", {"SYNCMEM_ALLOC_CONF": "expandable_page_mb:20"}),
    "syncmem-tensor": ("syncmem-tensor", {}),
}
# A check of the processes, pipes and tables without a GPU: a syncmem.tensor of
# an emulated device, read back through numpy. Not a contender.
HIDDEN_MODES = {"syncmem-tensor-emulated": ("emulated", {})}
ALL_MODES = {**MODES, **HIDDEN_MODES}
DEFAULT_SIZES = "4KiB,1MiB,64MiB"
METRICS = ("export", "import", "access", "close", "release")  # the table's rows, in order
METRIC_NAMES = {"export": "export", "import": "import", "access": "first access", "close": "close",
                "release": "release (parent)", "pickle": "pickle"}
SAMPLES = 16


def mode_environment(mode: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.pop("SYNCMEM_ALLOC_CONF", None)
    env.update(ALL_MODES[mode][1])
    return env


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?\s*", text, re.IGNORECASE)
    if not m:
        raise SystemExit(f"--sizes: cannot read {text!r} (e.g. 4KiB, 1MiB, 64MiB, 4096)")
    unit = (m.group(2) or "b").lower()[:1]
    size = int(m.group(1)) << {"b": 0, "k": 10, "m": 20, "g": 30}[unit]
    if size < 4:
        raise SystemExit(f"--sizes: {text!r} is less than one int32 element")
    return (size + 3) // 4 * 4


def size_label(size: int) -> str:
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return f"{size}B"


def describe(e: BaseException) -> str:
    """An exception in one line: its type and the first line of its message
    (c10's messages go on with a C++ backtrace)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= 300 else text[:297] + "..."


def sample_positions(elements: int, seed: int) -> list[int]:
    r = random.Random(seed * 1_000_003 + elements)
    positions = {0, elements - 1}
    while len(positions) < min(SAMPLES, elements):
        positions.add(r.randrange(elements))
    return sorted(positions)


# ---- how each mode makes, shares, reads and frees a tensor ----------------------


def seed_from_the_system() -> int:
    return int.from_bytes(os.urandom(8), "little") >> 1


class torch_share:
    """CUDA tensors through torch.multiprocessing's reductions, under PyTorch's
    allocator or syncmem.torch's (the modes but syncmem-tensor)."""

    def __init__(self, mode: str) -> None:
        import torch  # noqa: PLC0415

        if mode.startswith("syncmem"):
            import syncmem.torch  # noqa: PLC0415

            syncmem.torch.enable()
        from torch.multiprocessing.reductions import StorageWeakRef, reduce_tensor  # noqa: PLC0415

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        self.torch = torch
        self.reduce_tensor = reduce_tensor
        self.storage_ref = StorageWeakRef
        self.device = torch.device("cuda", 0)
        torch.cuda.set_device(self.device)
        torch.cuda.manual_seed(seed_from_the_system())
        torch.ones(1, device=self.device).sum().item()  # the context, the allocator, a kernel
        self.index = None

    def name(self) -> dict:
        return {"torch": self.torch.__version__, "device": self.torch.cuda.get_device_name(self.device)}

    def prepare(self, positions: list[int]) -> None:
        self.index = self.torch.tensor(positions, dtype=self.torch.int64, device=self.device)

    def make(self, elements: int):
        t = self.torch.empty(elements, dtype=self.torch.int32, device=self.device)
        t.random_()
        return t

    def samples(self, t) -> list[int]:
        return t[self.index].tolist()

    def checksum(self, t) -> int:
        return int(t.sum(dtype=self.torch.int64))

    def address(self, t) -> int:
        return t.data_ptr()

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def export(self, t):
        return self.reduce_tensor(t)

    def probe(self, x):
        """Something that tells after `del x` whether the storage is gone."""
        return self.storage_ref(x.untyped_storage())

    def after_release(self) -> None:
        pass

    def held(self) -> int:
        return self.torch.cuda.memory_allocated(self.device)


class syncmem_tensor_share:
    """syncmem.tensor on CUDA through syncmem's multiprocessing reducer; torch
    (its own allocator) reads it through DLPack."""

    def __init__(self, mode: str) -> None:
        import torch  # noqa: PLC0415

        import syncmem  # noqa: PLC0415

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        if not syncmem.built_with_cuda:
            raise RuntimeError("syncmem was built without its CUDA backend")
        self.torch = torch
        self.syncmem = syncmem
        self.device = torch.device("cuda", 0)
        torch.cuda.set_device(self.device)
        torch.cuda.manual_seed(seed_from_the_system())
        torch.ones(1, device=self.device).sum().item()
        probe = syncmem.tensor((1024,), "int32", "cuda:0", label="torch_ipc")
        torch.from_dlpack(probe).fill_(1)
        del probe
        self.index = None

    def name(self) -> dict:
        return {"torch": self.torch.__version__, "device": self.torch.cuda.get_device_name(self.device),
                "syncmem": self.syncmem.__version__}

    def prepare(self, positions: list[int]) -> None:
        self.index = self.torch.tensor(positions, dtype=self.torch.int64, device=self.device)

    def make(self, elements: int):
        t = self.syncmem.tensor((elements,), "int32", "cuda:0", label="torch_ipc", zero_fill=False)
        self.torch.from_dlpack(t).random_()  # the device side, now the newest
        return t

    def samples(self, t) -> list[int]:
        return self.torch.from_dlpack(t)[self.index].tolist()

    def checksum(self, t) -> int:
        return int(self.torch.from_dlpack(t).sum(dtype=self.torch.int64))

    def address(self, t) -> int:
        return t.device_ptr()

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)
        self.syncmem.synchronize("cuda:0")

    def export(self, t):
        return self.syncmem._reduce_shared_tensor(t)

    def probe(self, x):
        return None  # the parent's collect says whether the child closed it

    def after_release(self) -> None:
        self.syncmem.ipc_collect()

    def held(self) -> int:
        return self.syncmem.ipc_exports_held()


class emulated_share(syncmem_tensor_share):
    """The same on an emulated device, read through numpy: a check of this
    script's plumbing where there is no GPU."""

    def __init__(self, mode: str) -> None:  # noqa: ARG002
        import numpy  # noqa: PLC0415

        import syncmem  # noqa: PLC0415

        syncmem.enable_emulated_devices(count=1, memory_per_device=1 << 30)
        self.syncmem = syncmem
        self.numpy = numpy
        self.rng = numpy.random.default_rng(seed_from_the_system())
        self.positions = None

    def name(self) -> dict:
        return {"torch": None, "device": "emulated:0", "syncmem": self.syncmem.__version__}

    def prepare(self, positions: list[int]) -> None:
        self.positions = positions

    def make(self, elements: int):
        t = self.syncmem.tensor((elements,), "int32", "emulated:0", label="torch_ipc", zero_fill=False)
        t.numpy(writable=True)[...] = self.rng.integers(0, 1 << 31, elements, dtype=self.numpy.int32)
        t.device_ptr()  # the device side, up to date
        return t

    def samples(self, t) -> list[int]:
        return t.numpy()[self.positions].tolist()

    def checksum(self, t) -> int:
        return int(t.numpy().sum(dtype=self.numpy.int64))

    def synchronize(self) -> None:
        self.syncmem.synchronize("emulated:0")


def make_share(mode: str):
    kind = ALL_MODES[mode][0]
    if kind == "torch":
        return torch_share(mode)
    if kind == "syncmem-tensor":
        return syncmem_tensor_share(mode)
    return emulated_share(mode)


class shared_reduction:
    """Pickles as the reduction it holds, so that the receiver's pickle.loads
    runs the rebuild function, as for a tensor sent through multiprocessing."""

    __slots__ = ("reduction",)

    def __init__(self, reduction) -> None:
        self.reduction = reduction

    def __reduce__(self):
        return self.reduction


# ---- the child: imports, reads, closes ----------------------------------------------


def child_share(share, data: bytes, samples: list[int], checksum: int) -> tuple:
    t0 = time.perf_counter_ns()
    x = pickle.loads(data)
    t1 = time.perf_counter_ns()
    got = share.samples(x)
    t2 = time.perf_counter_ns()
    if got != samples:
        wrong = next(i for i, (a, b) in enumerate(zip(got, samples)) if a != b) if len(got) == len(samples) else 0
        raise AssertionError(f"the child read other values: sample {wrong} is {got[wrong] if got else None}, "
                             f"the parent wrote {samples[wrong]}")
    total = share.checksum(x)
    if total != checksum:
        raise AssertionError(f"the child's sum of all elements is {total}, the parent's {checksum}")
    share.synchronize()
    probe = share.probe(x)
    t3 = time.perf_counter_ns()
    del x
    t4 = time.perf_counter_ns()
    closed = probe is None or probe.expired()
    return ("done", t1 - t0, t2 - t1, t4 - t3, closed)


def child_main(conn, mode: str) -> None:
    """The child's loop (spawned): answers each message with ("ready", ...),
    ("done", ...) or ("error", text), and keeps going after an error."""
    try:
        share = make_share(mode)
    except BaseException as e:  # noqa: BLE001  (told to the parent, which reports it)
        conn.send(("error", "child: " + describe(e)))
        return
    conn.send(("ready", share.name()))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        try:
            if message[0] == "exit":
                return
            if message[0] == "size":
                gc.enable()
                gc.collect()
                share.prepare(message[1])
                gc.disable()  # no collection inside the timed steps
                conn.send(("ready",))
            elif message[0] == "share":
                conn.send(child_share(share, *message[1:]))
        except BaseException as e:  # noqa: BLE001
            conn.send(("error", "child: " + describe(e)))


# ---- the parent: one mode, every size --------------------------------------------------


class child_failed(Exception):
    pass


class child_process:
    def __init__(self, ctx, mode: str, timeout: float) -> None:
        self.conn, theirs = ctx.Pipe()
        self.process = ctx.Process(target=child_main, args=(theirs, mode), daemon=True)
        self.process.start()
        theirs.close()
        self.timeout = timeout

    def alive(self) -> bool:
        return self.process.is_alive()

    def ask(self, *message):
        try:
            if message:
                self.conn.send(message)
            if not self.conn.poll(self.timeout):
                self.process.kill()  # its late answer would be taken for the next one's
                self.process.join()
                raise child_failed(f"child: no answer in {self.timeout:g} s (killed)")
            reply = self.conn.recv()
        except (EOFError, OSError):
            self.process.join(10)
            raise child_failed(f"child: exited (status {self.process.exitcode})") from None
        if reply[0] == "error":
            raise child_failed(reply[1])
        return reply

    def stop(self) -> None:
        try:
            self.conn.send(("exit",))
        except OSError:
            pass
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def parent_share(share, child: child_process, elements: int) -> dict:
    from multiprocessing.reduction import ForkingPickler  # noqa: PLC0415

    before = share.held()
    t = share.make(elements)
    samples = share.samples(t)
    checksum = share.checksum(t)
    address = share.address(t)
    share.synchronize()
    t0 = time.perf_counter_ns()
    reduction = share.export(t)
    t1 = time.perf_counter_ns()
    data = bytes(ForkingPickler.dumps(shared_reduction(reduction)))
    t2 = time.perf_counter_ns()
    del reduction
    _, import_ns, access_ns, close_ns, closed = child.ask("share", data, samples, checksum)
    t3 = time.perf_counter_ns()
    del t
    share.after_release()
    t4 = time.perf_counter_ns()
    return {"export": t1 - t0, "pickle": t2 - t1, "import": import_ns, "access": access_ns, "close": close_ns,
            "release": t4 - t3, "closed": closed, "returned": share.held() == before, "address": address}


def run_size(share, child: child_process, size: int, iters: int, warmup: int, seed: int) -> dict:
    elements = size // 4
    positions = sample_positions(elements, seed)
    share.prepare(positions)
    child.ask("size", positions)
    gc.collect()
    gc.disable()  # no collection inside the timed steps
    try:
        steps = [parent_share(share, child, elements) for _ in range(warmup + iters)][warmup:]
    finally:
        gc.enable()
    result = {f"{m}_us": [round(s[m] / 1e3, 3) for s in steps] for m in (*METRICS, "pickle")}
    result.update(iters=iters, addresses=len({s["address"] for s in steps}),
                  not_closed=sum(not s["closed"] for s in steps), not_returned=sum(not s["returned"] for s in steps))
    return result


def run_pair(args, mode: str) -> dict:
    started = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    child = child_process(ctx, mode, args.timeout)  # starts while this process sets up
    result: dict = {"mode": mode, "sizes": {}}
    try:
        try:
            share = make_share(mode)
            result.update(share.name())
        except BaseException as e:  # noqa: BLE001
            result.update(error=describe(e), setup=True)
            return result
        try:
            child.ask()
        except child_failed as e:
            result.update(error=str(e), setup=True)
            return result
        for size in args.size_list:
            label = size_label(size)
            if not child.alive():
                child.stop()
                child = child_process(ctx, mode, args.timeout)
                try:
                    child.ask()
                except child_failed as e:
                    result["sizes"][label] = {"error": str(e)}
                    continue
            try:
                result["sizes"][label] = run_size(share, child, size, args.iters, args.warmup, args.seed)
            except Exception as e:  # noqa: BLE001  (the parent's own failure, or the child's)
                result["sizes"][label] = {"error": str(e) if isinstance(e, child_failed) else describe(e)}
    finally:
        child.stop()
        result["wall_s"] = round(time.perf_counter() - started, 2)
    return result


# ---- the driver -------------------------------------------------------------------------


def worker_command(args, mode: str) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "--worker", mode, "--sizes", args.sizes,
            "--iters", str(args.iters), "--warmup", str(args.warmup), "--seed", str(args.seed),
            "--timeout", str(args.timeout)]


def run_worker(args, mode: str) -> dict:
    try:
        proc = subprocess.run(worker_command(args, mode), env=mode_environment(mode), capture_output=True, text=True,
                              timeout=args.process_timeout)
    except subprocess.TimeoutExpired:
        return {"mode": mode, "error": f"the process ran past --process-timeout ({args.process_timeout:.0f} s)"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        error = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"mode": mode, "error": f"exit {proc.returncode}: {error}"}
    return json.loads(lines[-1])


def round_medians(size_result: dict) -> dict[str, float]:
    return {m: statistics.median(size_result[f"{m}_us"]) for m in (*METRICS, "pickle")}


def summarize(runs: list[dict], label: str) -> dict:
    ok, errors = [], []
    for r in runs:
        s = r.get("sizes", {}).get(label) if "error" not in r else None
        if s is None:
            errors.append(r.get("error", "not run"))
        elif "error" in s:
            errors.append(s["error"])
        else:
            ok.append(s)
    errors = [re.sub(r"0x[0-9a-fA-F]+", "0x...", e) for e in errors]  # one line for one failure at other addresses
    if not ok:
        return {"error": errors[0] if errors else "not run", "errors": sorted(set(errors)), "rounds": 0,
                "rounds_failed": len(errors)}
    medians = [round_medians(s) for s in ok]
    summary = {m: {"median": round(statistics.median(x[m] for x in medians), 3),
                   "min": round(min(x[m] for x in medians), 3), "max": round(max(x[m] for x in medians), 3)}
               for m in (*METRICS, "pickle")}
    summary.update(rounds=len(ok), rounds_failed=len(errors), errors=sorted(set(errors)),
                   addresses=statistics.median(s["addresses"] for s in ok),
                   not_closed=sum(s["not_closed"] for s in ok), not_returned=sum(s["not_returned"] for s in ok))
    return summary


def figure(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def cell(s: dict, metric: str) -> str:
    if "error" in s:
        return "error (below)" if metric == METRICS[0] else ""
    if metric == "addresses":
        return f"{s['addresses']:g}"
    v = s[metric]
    text = f"{figure(v['median'])} ({figure(v['min'])}..{figure(v['max'])})"
    return text + (" !" if s["rounds_failed"] else "")


def print_table(summary: dict[str, dict[str, dict]], modes: list[str], meta: dict) -> None:
    print(f"torch_ipc: {meta['description']}")
    print("microseconds per share: the median over rounds of each round's median (min..max of the rounds' medians); "
          "'!' = some rounds failed (below)")
    rows = [*METRICS, "addresses"]
    names = {**METRIC_NAMES, "addresses": "addresses"}
    first = max(len(names[r]) for r in rows) + 2
    widths = [max(len(m), *(len(cell(summary[label][m], r)) for label in summary for r in rows)) for m in modes]
    for label, by_mode in summary.items():
        print()
        print(f"{label:<{first}}" + "  ".join(f"{m:>{w}}" for m, w in zip(modes, widths)))
        for r in rows:
            print(f"  {names[r]:<{first - 2}}" + "  ".join(f"{cell(by_mode[m], r):>{w}}" for m, w in zip(modes, widths)))
    notes = []
    for label, by_mode in summary.items():
        for m in modes:
            s = by_mode[m]
            for e in s["errors"]:
                notes.append(f"{label} {m}: {s['rounds_failed']} of {s['rounds'] + s['rounds_failed']} rounds "
                             f"failed: {e}")
            if "error" in s:
                continue
            shares = s["rounds"] * meta["iters"]
            if s["not_closed"]:
                notes.append(f"{label} {m}: after `del x` the child still held the storage in {s['not_closed']} of "
                             f"{shares} shares")
            if s["not_returned"]:
                notes.append(f"{label} {m}: the parent's memory had not come back right after its release in "
                             f"{s['not_returned']} of {shares} shares (the child's close had not reached it yet)")
    if notes:
        print()
        for n in notes:
            print(n)


def ptrace_scope() -> str | None:
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def require_cuda(modes: list[str]) -> None:
    """Says plainly that there is nothing to measure here, rather than
    failing in every cell."""
    if all(ALL_MODES[m][0] == "emulated" for m in modes):
        return
    try:
        import torch  # noqa: PLC0415
    except ImportError as e:
        raise SystemExit(f"torch_ipc: needs PyTorch with CUDA ({e}); nothing measured") from e
    if not torch.cuda.is_available():
        raise SystemExit("torch_ipc: needs a CUDA device (torch.cuda.is_available() is False); nothing measured")


def drive(args) -> int:
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in ALL_MODES:
            raise SystemExit(f"--modes: unknown {m!r}; valid: {', '.join(MODES)}")
    require_cuda(modes)
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    unavailable: set[str] = set()
    started = time.perf_counter()
    rounds = 0
    for round_ in range(args.rounds):
        elapsed = time.perf_counter() - started
        if args.max_seconds and round_ and elapsed + elapsed / round_ > args.max_seconds:
            print(f"  stopped after {round_} rounds: another would end past --max-seconds {args.max_seconds:g}",
                  file=sys.stderr, flush=True)
            break
        rounds += 1
        # Alternate the order as well, so that no mode always runs first.
        for m in modes if round_ % 2 == 0 else list(reversed(modes)):
            if m in unavailable:
                continue
            r = run_worker(args, m)
            runs[m].append(r)
            if "error" in r:
                print(f"  round {round_ + 1} {m}: {r['error']}", file=sys.stderr, flush=True)
                if r.get("setup"):
                    unavailable.add(m)  # it will not set up in the next rounds either
                continue
            parts = []
            for label, s in r["sizes"].items():
                if "error" in s:
                    parts.append(f"{label} {s['error']}")
                else:
                    x = round_medians(s)
                    parts.append(f"{label} " + " ".join(f"{k} {figure(x[k])}" for k in METRICS) + " us")
            print(f"  round {round_ + 1} {m} ({r.get('wall_s', 0):.1f} s): " + "; ".join(parts),
                  file=sys.stderr, flush=True)
    labels = [size_label(s) for s in args.size_list]
    summary = {label: {m: summarize(runs[m], label) for m in modes} for label in labels}
    first = next((r for m in modes for r in runs[m] if "device" in r), {})
    scope = ptrace_scope()
    description = (f"{first.get('device', '?')}, PyTorch {first.get('torch', '?')}; {rounds} rounds (a fresh "
                   f"parent and spawned child per mode and round), {args.iters} shares of a new tensor per size after "
                   f"{args.warmup} untimed; kernel.yama.ptrace_scope {scope if scope is not None else 'absent'}; "
                   f"{time.perf_counter() - started:.0f} s")
    print_table(summary, modes, {"description": description, "iters": args.iters})
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"summary": summary, "runs": runs, "modes": modes, "sizes": labels, "rounds": rounds,
                       "iters": args.iters, "warmup": args.warmup, "seed": args.seed, "ptrace_scope": scope,
                       "device": first.get("device"), "torch": first.get("torch"), "description": description,
                       "metrics": {f"{m}_us": METRIC_NAMES[m] for m in (*METRICS, "pickle")}}, f, indent=1)
    # A mode or size that failed is in the table; the exit status says so too.
    failed = any("error" in r or any("error" in x for x in r.get("sizes", {}).values()) for rs in runs.values()
                 for r in rs)
    return 1 if failed else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated tensor sizes (4KiB, 1MiB, 64MiB, bytes)")
    p.add_argument("--rounds", type=int, default=5, help="process pairs per mode, at least 3 for a result")
    p.add_argument("--iters", type=int, default=50, help="timed shares per size and process")
    p.add_argument("--warmup", type=int, default=3, help="untimed shares per size first")
    p.add_argument("--seed", type=int, default=29, help="the sampled positions' seed (the values are fresh)")
    p.add_argument("--json", help="write the summary and every process's figures here")
    p.add_argument("--timeout", type=float, default=120, help="seconds to wait for the child's answer")
    p.add_argument("--process-timeout", type=float, default=600, help="seconds for one mode's process pair")
    p.add_argument("--max-seconds", type=float, default=0,
                   help="start no round that would end past this many seconds of the run, judged by the rounds "
                        "so far (0: no limit); the table then covers the rounds done")
    p.add_argument("--worker", metavar="MODE", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.size_list = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    if args.iters < 1 or args.rounds < 1 or args.warmup < 0:
        raise SystemExit("--iters and --rounds must be at least 1, --warmup at least 0")
    if args.worker:
        if args.worker not in ALL_MODES:
            raise SystemExit(f"--worker: unknown mode {args.worker!r}; valid: {', '.join(ALL_MODES)}")
        print(json.dumps(run_pair(args, args.worker)))
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
