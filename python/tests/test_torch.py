"""syncmem.torch: syncmem's caching allocator as PyTorch's CUDA allocator.

The allocator must be installed before CUDA is used, so every case runs in a
fresh interpreter (a subprocess) and asserts there; this process only starts
them and reads what they print. Skipped without torch, without a CUDA device,
or with a syncmem built without CUDA.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import checked, run_python

import syncmem

torch = pytest.importorskip("torch")

if not (syncmem.built_with_cuda and torch.cuda.is_available() and syncmem.device_count("cuda") > 0):
    pytest.skip("syncmem.torch needs a CUDA device, torch with CUDA and syncmem built with CUDA",
                allow_module_level=True)


def test_module_is_built():
    # With torch and CUDA here, `pip install --no-build-isolation .` builds syncmem._torch.
    checked(run_python("import torch, syncmem.torch; syncmem.torch._native()"))


TRAIN = """
import json, sys
import torch
mode = sys.argv[1]
if mode == "syncmem":
    import syncmem, syncmem.torch
    syncmem.torch.enable()
torch.manual_seed(1234)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
dev = torch.device("cuda")
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
    torch.nn.Linear(8 * 16 * 16, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(99)
x = torch.randn(512, 3, 16, 16, generator=g).to(dev)
y = torch.randint(0, 10, (512,), generator=g).to(dev)
losses = []
for step in range(40):
    i = (step * 64) % 512
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64])
    loss.backward()
    opt.step()
    losses.append(loss.item())
out = {"losses": losses}
if mode == "syncmem":
    out["enabled"] = syncmem.torch.enabled()
    out["syncmem_allocations"] = syncmem.memory_stats("cuda:0")["allocations"]
    out["torch_allocations"] = torch.cuda.memory_stats()["allocation.all.allocated"]
print(json.dumps(out))
"""


# "": syncmem.torch's defaults (the growable range with grow_from_idle);
# then plain segments, and the growable range without grow_from_idle.
@pytest.mark.parametrize("conf", ["", "expandable:0", "grow_from_idle:0"])
def test_training_reaches_the_same_losses_and_exits_quietly(conf):
    env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    native = checked(run_python(TRAIN, "torch", env=env))
    ours = checked(run_python(TRAIN, "syncmem", env={**env, **({"SYNCMEM_ALLOC_CONF": conf} if conf else {})}))
    a = json.loads(native.stdout)["losses"]
    out = json.loads(ours.stdout)
    b = out["losses"]
    assert out["enabled"]
    assert out["syncmem_allocations"] > 0 and out["torch_allocations"] == out["syncmem_allocations"]
    assert len(a) == len(b) == 40
    assert a[-1] < a[0]  # it trained
    for step, (x, y) in enumerate(zip(a, b)):
        assert abs(x - y) <= 1e-6 * max(1.0, abs(x)), f"step {step}: PyTorch's allocator {x}, syncmem's {y}"
    print("bitwise equal losses:", a == b)
    # Process exit: no warning about memory freed after its resource, nothing
    # printed that PyTorch's own allocator does not print.
    print("stderr with PyTorch's allocator:", repr(native.stderr))
    assert ours.stderr == native.stderr, f"stderr with syncmem:\n{ours.stderr}\nwith PyTorch's:\n{native.stderr}"
    assert "syncmem" not in ours.stderr


DEFAULT_OPTIONS = """
import json, random, sys, warnings
import torch
import syncmem, syncmem.torch
if sys.argv[2] == "used-before":
    syncmem.memory_stats("cuda:0")  # makes cuda:0's caching resource, with the C++ library's defaults
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    syncmem.torch.enable()
rng = random.Random(int(sys.argv[3]))
ts = [torch.empty(rng.randint(1 << 20, 64 << 20), dtype=torch.uint8, device="cuda") for _ in range(4)]
syncmem.torch.save_snapshot(sys.argv[1])
segments = json.load(open(sys.argv[1]))["segments"]
print(json.dumps({
    "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
    "pools": sorted({seg["pool"] for seg in segments}),
    "expandable": sorted({seg["is_expandable"] for seg in torch.cuda.memory_snapshot()}),
}))
"""


@pytest.mark.parametrize("case", ["default", "expandable:0", "used-before"])
def test_enable_makes_the_growable_range_the_default(tmp_path, case):
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed}")
    env = {"SYNCMEM_ALLOC_CONF": "expandable:0"} if case == "expandable:0" else {}
    out = json.loads(checked(run_python(DEFAULT_OPTIONS, str(tmp_path / "s.json"), case, str(seed), env=env)).stdout)
    if case == "default":  # 1..64 MiB blocks: the growable range's (grow_from_idle sends above 256 KiB there)
        assert out["warnings"] == [] and "expandable" in out["pools"] and True in out["expandable"], out
    elif case == "expandable:0":  # SYNCMEM_ALLOC_CONF's keys win
        assert out["warnings"] == [] and "expandable" not in out["pools"] and out["expandable"] == [False], out
    else:  # cuda:0's resource was made before enable(): it keeps its options, and enable() says so
        assert "expandable" not in out["pools"] and out["expandable"] == [False], out
        assert len(out["warnings"]) == 1, out
        message = out["warnings"][0]
        assert message.startswith("RuntimeWarning: syncmem.torch.enable: the caching resource of cuda:0 was made before")
        assert "expandable:0" in message and "grow_from_idle:1" in message, message


STATS = """
import json, sys
import torch
import syncmem, syncmem.torch
syncmem.torch.enable()
assert syncmem.torch.enabled()
dev = "cuda:0"
sizes = (1000, 3 << 20, 5 << 20, 123457, 40 << 20)
ts = [torch.empty(n, dtype=torch.uint8, device=dev) for n in sizes]
s = syncmem.memory_stats(dev)
ms = torch.cuda.memory_stats()
assert torch.cuda.memory_allocated() == s["allocated_bytes"] > sum(sizes) - 1, (torch.cuda.memory_allocated(), s)
assert torch.cuda.memory_reserved() == s["reserved_bytes"] >= s["allocated_bytes"], s
assert torch.cuda.max_memory_allocated() == s["peak_allocated_bytes"], s
assert torch.cuda.max_memory_reserved() == s["peak_reserved_bytes"], s
assert ms["requested_bytes.all.current"] == s["requested_bytes"] == sum(sizes), (ms, s)
assert ms["allocation.all.current"] == s["live_allocations"] == len(sizes), (ms, s)
assert ms["segment.all.current"] == s["segments"] > 0, (ms, s)
assert ms["num_alloc_retries"] == s["oom_retries"] and ms["num_ooms"] == s["ooms"] == 0, (ms, s)
assert ms["num_device_alloc"] == s["segment_allocations"] > 0, (ms, s)
assert ms["num_device_free"] == s["segment_releases"], (ms, s)

peak = torch.cuda.max_memory_allocated()
freed = ms["allocated_bytes.all.freed"], ms["requested_bytes.all.freed"]
del ts[4]
assert torch.cuda.max_memory_allocated() == peak
# Accumulated bytes are syncmem's totals: the 40 MiB tensor's block is now "freed".
ms = torch.cuda.memory_stats()
assert ms["requested_bytes.all.freed"] - freed[1] == 40 << 20, (ms, freed)
assert ms["allocated_bytes.all.freed"] - freed[0] >= 40 << 20, (ms, freed)
assert (ms["allocated_bytes.all.freed"] - freed[0]) % 512 == 0, (ms, freed)
assert ms["allocated_bytes.all.allocated"] - ms["allocated_bytes.all.freed"] == ms["allocated_bytes.all.current"], ms
assert ms["requested_bytes.all.allocated"] - ms["requested_bytes.all.freed"] == ms["requested_bytes.all.current"], ms
torch.cuda.reset_accumulated_memory_stats()
ms = torch.cuda.memory_stats()
assert ms["allocated_bytes.all.allocated"] == ms["allocated_bytes.all.freed"] == 0, ms
assert ms["requested_bytes.all.allocated"] == ms["requested_bytes.all.freed"] == 0, ms
assert ms["requested_bytes.all.current"] == sum(t.numel() for t in ts), ms
torch.cuda.reset_peak_memory_stats()
assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated() < peak
assert syncmem.memory_stats(dev)["peak_allocated_bytes"] == torch.cuda.max_memory_allocated()

# The snapshot has every live tensor as an allocated block of its requested size.
# Streams and pools are syncmem's typed fields: every segment here was reserved
# for (or, expandable, belongs to no stream but reads as) the current stream.
blocks = {}
stream = torch.cuda.current_stream().cuda_stream
for seg in torch.cuda.memory_snapshot():
    address = seg["address"]
    assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"], seg
    assert seg["stream"] == stream or (seg["is_expandable"] and seg["stream"] == 0), (seg["stream"], stream)
    assert seg["segment_type"] == "large" or not seg["is_expandable"], seg
    if address <= ts[0].data_ptr() < address + seg["total_size"]:
        assert seg["segment_type"] == "small" and not seg["is_expandable"], seg
    for b in seg["blocks"]:
        blocks[address] = (b["state"], b["requested_size"])
        address += b["size"]
for t in ts:
    assert blocks.get(t.data_ptr()) == ("active_allocated", t.numel()), (t.data_ptr(), blocks.get(t.data_ptr()))

# save_snapshot writes syncmem's own form, the one `syncmem view` draws.
path = sys.argv[1]
syncmem.torch.save_snapshot(path)
snap = json.load(open(path))
assert snap["format"] == "syncmem.snapshot/1" and snap["device"] == "cuda:0", snap.keys()
allocated = {int(seg["address"], 16) + b["offset"]: b.get("requested") for seg in snap["segments"]
             for b in seg["blocks"] if b["state"] == "allocated"}
for t in ts:
    assert allocated.get(t.data_ptr()) == t.numel(), t.data_ptr()

before = torch.cuda.memory_reserved()
del ts, t
torch.cuda.empty_cache()
assert torch.cuda.memory_reserved() < before, (torch.cuda.memory_reserved(), before)
assert torch.cuda.memory_reserved() == syncmem.memory_stats(dev)["reserved_bytes"]
assert torch.cuda.memory_allocated() == 0
print("ok")
"""


def test_statistics_snapshot_and_empty_cache_come_from_syncmem(tmp_path):
    path = tmp_path / "snapshot.json"
    checked(run_python(STATS, str(path)))
    cli = os.environ.get("SYNCMEM_CLI") or shutil.which("syncmem")
    if cli:  # the C++ command, when it is built beside the package
        page = tmp_path / "snapshot.html"
        view = subprocess.run([cli, "view", str(path), "-o", str(page)], capture_output=True, text=True)
        assert view.returncode == 0, view.stderr
        assert view.stderr == "" and page.stat().st_size > 0


RECORD_STREAM = """
import random, sys
import torch
import syncmem, syncmem.torch
from syncmem import _torch
syncmem.torch.enable()
seed, record = int(sys.argv[1]), sys.argv[2] == "record"
rng = random.Random(seed)
torch.manual_seed(seed)
dev = "cuda:0"
main = torch.cuda.current_stream()
sides = [torch.cuda.Stream() for _ in range(3)]
def block(n):
    return (n + 511) // 512 * 512
reused = 0
for iteration in range(40 if record else 1):
    count = rng.randint(1, 6)
    sizes = [rng.choice((rng.randint(1, 4096), rng.randint(1 << 16, 1 << 21), rng.randint(1 << 21, 1 << 23)))
             for _ in range(count)]
    victims = [torch.randint(0, 256, (n,), dtype=torch.uint8, device=dev) for n in sizes]
    expected = [v.cpu() for v in victims]
    outs = [torch.empty(n, dtype=torch.uint8, device=dev) for n in sizes]
    side = rng.choice(sides)
    side.wait_stream(main)
    latch = _torch._host_latch(side.cuda_stream)  # the side stream's reads below cannot start before release()
    with torch.cuda.stream(side):
        for v, o in zip(victims, outs):
            o.copy_(v)
    freed = [(v.data_ptr(), v.data_ptr() + block(v.numel())) for v in victims]
    if record:
        for v in victims:
            v.record_stream(side)
    del v
    victims.clear()  # freed on the main stream while the side stream still has to read them
    if record:
        assert syncmem.memory_stats(dev)["pending_bytes"] >= sum(block(n) for n in sizes)
    news = [torch.empty(n, dtype=torch.uint8, device=dev) for n in sizes]
    fresh = [torch.randint(0, 256, (n,), dtype=torch.uint8, device=dev) for n in sizes]
    for t, f in zip(news, fresh):
        t.copy_(f)  # main stream: runs before the side stream's reads when a block is reused
    # Every block allocated while the side stream is held, news and fresh alike.
    overlap = [any(t.data_ptr() < hi and lo < t.data_ptr() + t.numel() for lo, hi in freed) for t in news + fresh]
    if record:
        assert not any(overlap), f"iteration {iteration}: a block freed with a pending recorded stream was reused"
    reused += sum(overlap)
    latch.release()
    torch.cuda.synchronize()
    if record:  # without record_stream, a reused block's out holds what the main stream wrote there
        for i, (o, e) in enumerate(zip(outs, expected)):
            assert torch.equal(o.cpu(), e), f"iteration {iteration}: tensor {i} ({sizes[i]} bytes) was overwritten"
    for t, f in zip(news, fresh):
        assert torch.equal(t.cpu(), f.cpu())
    del news, fresh, outs
print(reused)
"""


# The side stream waits on a host latch while the main thread allocates: a
# growth that gave idle memory back (release_before_grow) would synchronise
# the device and wait for it forever (docs/allocator.md, "Growing"). Over
# syncmem.torch's defaults (the growable range), and with plain segments.
LATCHED = ["release_before_grow:0", "expandable:0,release_before_grow:0"]


@pytest.mark.parametrize("conf", LATCHED)
def test_record_stream_keeps_freed_blocks_until_the_recorded_stream_passes(conf):
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed}")
    env = {"SYNCMEM_ALLOC_CONF": conf}
    assert checked(run_python(RECORD_STREAM, str(seed), "record", env=env)).stdout.strip() == "0"


@pytest.mark.parametrize("conf", LATCHED)
def test_without_record_stream_the_block_is_reused_at_once(conf):
    # The control: the hazard record_stream prevents is real in this setup
    # (the freed block goes straight to the next allocation on its stream).
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed}")
    env = {"SYNCMEM_ALLOC_CONF": conf}
    assert int(checked(run_python(RECORD_STREAM, str(seed), "none", env=env)).stdout.strip()) > 0


IMPORTED_FIRST = """
import syncmem, syncmem.torch  # before torch: syncmem must not bring a second CUDA runtime
syncmem.torch.enable()
import torch
x = torch.arange(1 << 20, device="cuda")  # int64: the sum is exact
assert (x * 2).sum().item() == (1 << 20) * ((1 << 20) - 1)
runtimes = {line.split()[-1] for line in open("/proc/self/maps") if "libcudart.so" in line}
assert len(runtimes) == 1, f"CUDA runtimes loaded: {sorted(runtimes)}"
print("ok")
"""


def test_syncmem_imported_before_torch_shares_its_cuda_runtime():
    # Also the regression test of an abort in free() where the toolchain linked
    # libstdc++ statically into libsyncmem and exported it (the H100 machine's).
    assert checked(run_python(IMPORTED_FIRST)).stdout.strip().endswith("ok")


GRAPHS = """
import gc, sys
import torch
if sys.argv[2] == "syncmem":
    import syncmem.torch
    syncmem.torch.enable()
seed = int(sys.argv[1])
dev = torch.device("cuda")
gen = torch.Generator(device=dev).manual_seed(seed)
n = 8 * 1024 * 1024  # 32 MiB of float32 per intermediate
x = torch.empty(n, device=dev)
side = torch.cuda.Stream()
captured = []  # addresses the graphs allocated

def first(record):
    # the side stream is forked from the capturing one and joined back
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        d = x + 2
        e = d * x
    torch.cuda.current_stream().wait_stream(side)
    a = x * 3 + 1
    b = a.relu() - x
    if record:
        captured.extend([d.data_ptr(), e.data_ptr(), a.data_ptr(), b.data_ptr()])
    del a, d
    return b * b + e, e

def second(y, record):
    c = y * 0.5 - x
    if record:
        captured.append(c.data_ptr())
    return torch.cat([c[: n // 2], y[n // 2:]]) + 1

# Warm-up outside capture, every kernel used below included (the first use
# of a kernel may grow CUDA's own reservations), then the free memory the
# graphs must give back.
x.normal_(generator=gen)
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(2):
        y, _e = first(False)
        _z = second(y, False)
        assert torch.equal(y, y) and torch.equal(_z, _z)
torch.cuda.current_stream().wait_stream(s)
y, _e = first(False)
_z = second(y, False)
assert torch.equal(y, y) and torch.equal(_z, _z)
torch.cuda.synchronize()
del y, _e, _z
torch.cuda.synchronize()
torch.cuda.empty_cache()
free_before = torch.cuda.mem_get_info()[0]

pool = torch.cuda.graph_pool_handle()
g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
with torch.cuda.graph(g1, pool=pool):
    out1, e_out = first(True)
with torch.cuda.graph(g2, pool=pool):
    out2 = second(out1, True)
captured += [out1.data_ptr(), e_out.data_ptr(), out2.data_ptr()]
assert torch.cuda.mem_get_info()[0] < free_before - 4 * n * 4, "the graphs reserved nothing"
# memory_snapshot() shows the graphs' blocks in segments of their pool (segment_pool_id), as PyTorch's does.
owned = [(s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot()
         if tuple(s["segment_pool_id"]) == tuple(pool)]
for p in captured[-3:]:
    assert any(a <= p < a + size for a, size in owned), "a graph's block is not in its pool's segments"
if sys.argv[2] == "syncmem":
    # Large blocks come from a growable segment per stream, shown as PyTorch shows expandable segments.
    large = [s for s in torch.cuda.memory_snapshot()
             if tuple(s["segment_pool_id"]) == tuple(pool) and s["total_size"] > (2 << 20)]
    assert large and all(s["is_expandable"] and s["stream"] != 0 for s in large), large

for launch in range(20):
    x.normal_(generator=gen)
    g1.replay()
    g2.replay()
    # the same computation eagerly, on memory outside the graphs
    y, e = first(False)
    z = second(y, False)
    torch.cuda.synchronize()
    for t in (y, e, z):
        assert t.data_ptr() not in captured, "an ordinary tensor got a graph's memory"
    assert torch.equal(out1, y), f"launch {launch}: the first graph's output differs"
    assert torch.equal(out2, z), f"launch {launch}: the second graph's output differs"

del g1, g2, out1, out2, e_out, y, e, z
gc.collect()
torch.cuda.synchronize()
torch.cuda.empty_cache()
print(free_before - torch.cuda.mem_get_info()[0])  # what the graphs kept
"""


def test_cuda_graphs_allocate_from_syncmem_graph_pools_and_give_them_back():
    # PyTorch's own allocator runs the same script as the control: what CUDA
    # itself keeps after the graphs go is allowed, no more.
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed}")
    kept = {mode: int(checked(run_python(GRAPHS, str(seed), mode)).stdout.strip().splitlines()[-1])
            for mode in ("torch", "syncmem")}
    print(f"bytes kept after the graphs went: {kept}")
    assert kept["syncmem"] <= max(kept["torch"], 0) + (16 << 20), kept


REDUCE_OVERHEAD = """
import copy, json, sys
import torch
mode, seed = sys.argv[1], int(sys.argv[2])
if mode == "syncmem":
    import syncmem.torch
    syncmem.torch.enable()
import torch._inductor.config as inductor_config
# Graph trees then check each pool's live blocks against the live tensors
# after every recording and replay (checkPoolLiveAllocations).
inductor_config.triton.slow_path_cudagraph_asserts = True
torch.manual_seed(seed)
dev = "cuda"
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).to(dev)
g = torch.Generator().manual_seed(seed)
# Shapes that come back after others: graph trees record a graph per shape,
# replay it when it returns, and restore a checkpoint of the pool before
# recording on another path (setCheckpointPoolState).
batches = [8, 16, 8, 32, 16, 8, 32, 24, 8, 24, 16, 32]

infer = torch.compile(model, mode="reduce-overhead")
with torch.no_grad():
    for b in batches:
        x = torch.randn(b, 64, generator=g).to(dev)
        y = infer(x).clone()
        torch.testing.assert_close(y, model(x), rtol=1e-4, atol=1e-4)

eager = copy.deepcopy(model)
compiled = copy.deepcopy(model)
step = torch.compile(compiled, mode="reduce-overhead")
opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
opt_c = torch.optim.SGD(compiled.parameters(), lr=0.05)
losses = []
for b in batches:
    x = torch.randn(b, 64, generator=g).to(dev)
    target = torch.randn(b, 64, generator=g).to(dev)
    for net, opt, fwd in ((eager, opt_e, eager), (compiled, opt_c, step)):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(fwd(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
pairs = list(zip(losses[0::2], losses[1::2]))
for e, c in pairs:
    assert abs(e - c) <= 1e-3 * max(1.0, abs(e)), pairs
for pe, pc in zip(eager.parameters(), compiled.parameters()):
    torch.testing.assert_close(pc, pe, rtol=1e-3, atol=1e-4)
out = {"losses": pairs}
if mode == "syncmem":
    import syncmem
    out["syncmem_allocations"] = syncmem.memory_stats("cuda:0")["allocations"]
print(json.dumps(out))
"""


def test_torch_compile_reduce_overhead_records_replays_and_trains():
    # CUDA graph trees: inference and training with shapes that come and go.
    # Native PyTorch runs the same script first, as the control.
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed}")
    for mode in ("torch", "syncmem"):
        out = json.loads(checked(run_python(REDUCE_OVERHEAD, mode, str(seed), timeout=600)).stdout.strip().splitlines()[-1])
        print(mode, out)
    assert out["syncmem_allocations"] > 0


UNKNOWN_POOLS = """
import torch
import syncmem.torch
syncmem.torch.enable()
x = torch.ones(1000, device="cuda")
def expect(what, f):
    try:
        f()
    except (RuntimeError, NotImplementedError) as e:
        assert what in str(e), f"{what!r} not in {e}"
        assert "syncmem" in str(e), e
        return
    raise AssertionError(f"{what}: no error")
# A graph pool nobody made: the call is named.
expect("checkPoolLiveAllocations", lambda: torch._C._cuda_checkPoolLiveAllocations(0, (0, 12345), set()))
expect("getCheckpointState", lambda: torch._C._cuda_getCheckpointState(0, (0, 12345)))
print("ok")
"""


def test_calls_on_unknown_graph_pools_raise_naming_the_call():
    checked(run_python(UNKNOWN_POOLS))


# torch.cuda.caching_allocator_enable(False): allocations go straight to
# cudaMalloc and cudaFree, outside syncmem's caches and counts, and work;
# enabling it again brings syncmem's cache back.
CACHING_OFF = """
import sys
import torch
import syncmem.torch
syncmem.torch.enable()
dev = "cuda"
torch.ones(1, device=dev)
values = torch.randn(1 << 20, generator=torch.Generator().manual_seed(int(sys.argv[1])))
counted = lambda: torch.cuda.memory_stats()["requested_bytes.all.allocated"]
before = counted()
torch.cuda.caching_allocator_enable(False)
try:
    x = values.to(dev)
    y = x * 2
    assert torch.equal(y.cpu(), values * 2)
    assert counted() == before, "an allocation with the caching off went through syncmem's cache"
    del x, y
finally:
    torch.cuda.caching_allocator_enable(True)
z = values.to(dev)
assert counted() > before, "enabling the caching again did not bring syncmem's cache back"
assert torch.equal(z.cpu(), values)
print("ok")
"""


def test_turning_the_caching_off_goes_straight_to_cuda():
    checked(run_python(CACHING_OFF, str(int.from_bytes(os.urandom(4), "little"))))


TOO_LATE = """
import torch
import syncmem, syncmem.torch
x = torch.ones(10, device="cuda")
try:
    syncmem.torch.enable()
except syncmem.LogicError as e:  # a call out of order
    assert "already initialized" in str(e) and "before the first CUDA tensor" in str(e), e
else:
    raise AssertionError("enable() after CUDA was used did not raise")
assert not syncmem.torch.enabled()
assert (x + 1).sum().item() == 20  # PyTorch's own allocator still works
print("ok")
"""


# torch.multiprocessing sends a CUDA tensor to a spawned child: the child maps
# the sender's memory (plain segments: CUDA IPC of the cudaMalloc segment;
# the growable range: the block's pages), reads it, doubles it in place, and
# the sender sees the doubled values; once the child has exited and torch has
# collected, the sender's memory is back, and the device's free memory is what
# it was before anything was shared (nothing leaks: no page, no descriptor
# that would keep one).
SHARE = """
import sys
import time
import torch
import torch.multiprocessing as mp
import syncmem.torch


def child(inbox, outbox):
    syncmem.torch.enable()
    shared = inbox.get()
    outbox.put([float(t.double().sum().item()) for t in shared])
    for t in shared:
        t.mul_(2)
    torch.cuda.synchronize()
    outbox.put("doubled")
    del shared, t


def share_round(ctx, g):
    values = torch.randn(int(torch.randint(1 << 10, 1 << 20, (1,), generator=g)), generator=g)
    smalls = torch.randn(2, int(torch.randint(1, 4096, (1,), generator=g)), generator=g)
    baseline = torch.cuda.memory_allocated()
    x = values.cuda()
    # Small blocks share a segment: the second starts inside it, at an offset.
    pad = smalls[0].cuda()
    small = smalls[1].cuda()
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child, args=(inbox, outbox))
    p.start()
    inbox.put((x, small))
    sums = outbox.get(timeout=300)
    for got, want in zip(sums, (values, smalls[1])):
        assert abs(got - float(want.double().sum())) < 1e-6 * want.numel(), (sums, got, want.numel())
    assert outbox.get(timeout=300) == "doubled"
    assert torch.equal(x.cpu(), values * 2)
    assert torch.equal(small.cpu(), smalls[1] * 2)
    assert torch.equal(pad.cpu(), smalls[0]), "the block beside the shared one is untouched"
    p.join(300)
    assert p.exitcode == 0, p.exitcode
    del x, pad, small
    torch.cuda.ipc_collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == baseline, (torch.cuda.memory_allocated(), baseline)
    torch.cuda.empty_cache()


if __name__ == "__main__":
    syncmem.torch.enable()
    torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    ctx = mp.get_context("spawn")
    g = torch.Generator().manual_seed(int(sys.argv[1]))
    # Measured from after the first share. Free memory is the whole device's:
    # run alone (H200), the shares end where a settled start before the first
    # one was, in both layouts and with PyTorch's own allocator; inside a
    # pytest run the first share ends 64 KiB short of it with each of the
    # three, PyTorch's included, and later shares end where the first did.
    # Any later share that leaves memory behind fails.
    share_round(ctx, g)
    free_at_start = torch.cuda.mem_get_info()[0]
    share_round(ctx, g)
    # The driver takes the child's context down after it exits: wait for that, within a minute.
    deadline = time.monotonic() + 60
    while torch.cuda.mem_get_info()[0] != free_at_start and time.monotonic() < deadline:
        time.sleep(0.1)
    free = torch.cuda.mem_get_info()[0]
    assert free == free_at_start, f"{free_at_start - free} bytes of the device not back after every share ended"
    print("ok")
"""


@pytest.mark.parametrize("conf", ["expandable:0", ""], ids=["plain-segments", "growable-range"])
def test_torch_multiprocessing_shares_cuda_tensors(tmp_path, conf):
    script = tmp_path / "share.py"  # spawn's children import the parent's main module
    script.write_text(SHARE)
    env = {k: v for k, v in os.environ.items() if k != "SYNCMEM_ALLOC_CONF"}
    if conf:
        env["SYNCMEM_ALLOC_CONF"] = conf
    seed = str(int.from_bytes(os.urandom(4), "little"))
    out = checked(subprocess.run([sys.executable, str(script), seed], capture_output=True, text=True, env=env,
                                 timeout=600, cwd=tmp_path))
    assert out.stdout.strip().endswith("ok"), out.stdout


# torch.cuda.MemPool: allocations inside use_mem_pool come from the pool (its
# snapshot holds them; the whole snapshot marks them as the pool's), on this
# thread only; use_count follows PyTorch's; empty_cache leaves a MemPool in
# use what it cached, and its memory goes back once the MemPool and its
# tensors are gone; use_on_oom lends the pool to allocations that
# fail elsewhere; its memory counts in memory_stats and under the memory
# fraction; a MemPool with an allocator of its own is refused by name.
MEM_POOL = """
import os, subprocess, sys, tempfile, threading
import torch
import syncmem.torch
syncmem.torch.enable()
rng = torch.Generator().manual_seed(int(sys.argv[1]))
dev = torch.device("cuda")
torch.ones(1, device=dev)
torch.cuda.empty_cache()
free_at_start = torch.cuda.mem_get_info()[0]

def addresses(snapshot):
    return {(s["address"], s["total_size"]) for s in snapshot}

def inside(t, snapshot):
    p = t.data_ptr()
    return any(a <= p < a + n for a, n in addresses(snapshot))

for no_split in (False, True):
    pool = torch.cuda.MemPool(no_split=no_split)
    assert pool.use_count() == 1, pool.use_count()
    sizes = [int(torch.randint(1, 64 << 20, (1,), generator=rng)) for _ in range(8)]
    values = [torch.randint(0, 255, (n,), dtype=torch.uint8, generator=rng) for n in sizes]
    with torch.cuda.use_mem_pool(pool):
        assert pool.use_count() == 2, pool.use_count()
        inside_pool = [v.to(dev) for v in values]
        spare = torch.empty(8 << 20, dtype=torch.uint8, device=dev)
        other_thread = []
        t = threading.Thread(target=lambda: other_thread.append(torch.empty(1 << 20, device=dev)))
        t.start(); t.join()
    outside = torch.empty(1 << 20, device=dev)
    assert pool.use_count() == 1, pool.use_count()
    snap = pool.snapshot()
    assert all(inside(x, snap) for x in inside_pool), "an allocation inside use_mem_pool is not in the pool"
    assert not inside(outside, snap) and not inside(other_thread[0], snap), "allocations outside went to the pool"
    # The whole snapshot shows them too, in segments marked as the pool's, as PyTorch's does.
    whole = torch.cuda.memory_snapshot()
    owned = [s for s in whole if tuple(s["segment_pool_id"]) == tuple(pool.id)]
    assert all(inside(x, owned) for x in inside_pool), "the whole snapshot does not mark the pool's segments"
    assert not any(inside(x, [s for s in whole if s not in owned]) for x in inside_pool)
    for x, v in zip(inside_pool, values):
        assert torch.equal(x.cpu(), v)
    # As under PyTorch's allocator, empty_cache leaves a MemPool in use what it cached.
    spare_at = spare.data_ptr()
    del spare
    cached = pool.snapshot()
    torch.cuda.empty_cache()
    kept = pool.snapshot() == cached and any(a <= spare_at < a + n for a, n in addresses(cached))
    assert kept, "empty_cache gave back what a MemPool in use had cached"
    # The MemPool goes first, its tensors after: the memory comes back with the last of them.
    del pool
    for x, v in zip(inside_pool, values):
        assert torch.equal(x.cpu(), v)
    del inside_pool, x, outside, other_thread
    torch.cuda.empty_cache()
    left = free_at_start - torch.cuda.mem_get_info()[0]
    assert left <= (2 << 20), f"{left} bytes not given back"

# Nested use_mem_pool: the innermost pool takes the allocations; the outer one again once it ends.
outer, inner = torch.cuda.MemPool(), torch.cuda.MemPool()
with torch.cuda.use_mem_pool(outer):
    a = torch.empty(1 << 20, device=dev)
    with torch.cuda.use_mem_pool(inner):
        b = torch.empty(1 << 20, device=dev)
    c = torch.empty(1 << 20, device=dev)
assert inside(a, outer.snapshot()) and inside(c, outer.snapshot()) and inside(b, inner.snapshot())
assert not inside(b, outer.snapshot()) and not inside(a, inner.snapshot()) and not inside(c, inner.snapshot())
del a, b, c, outer, inner

# use_on_oom: under a limit, an allocation the default pool cannot serve takes the pool's free memory.
pool = torch.cuda.MemPool(use_on_oom=True)
with torch.cuda.use_mem_pool(pool):
    block = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
del block  # 256 MiB cached in the pool
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + (64 << 20)) / total)
big = torch.empty(200 << 20, dtype=torch.uint8, device=dev)  # fits only in the pool's cached memory
assert inside(big, pool.snapshot()), "use_on_oom did not lend the pool"
del big
torch.cuda.set_per_process_memory_fraction(1.0)
del pool
torch.cuda.empty_cache()

# A MemPool's memory counts in torch.cuda.memory_stats and under the memory
# fraction, as under PyTorch's allocator.
pool = torch.cuda.MemPool()
before = torch.cuda.memory_stats()
n = int(torch.randint(1 << 20, 64 << 20, (1,), generator=rng))
with torch.cuda.use_mem_pool(pool):
    x = torch.empty(n, dtype=torch.uint8, device=dev)
now = torch.cuda.memory_stats()
assert now["requested_bytes.all.current"] - before["requested_bytes.all.current"] == n, (before, now)
assert now["allocated_bytes.all.current"] - before["allocated_bytes.all.current"] >= n, (before, now)
assert now["reserved_bytes.all.current"] - before["reserved_bytes.all.current"] >= n, (before, now)
assert torch.cuda.max_memory_allocated() >= now["allocated_bytes.all.current"]
torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + (32 << 20)) / total)
try:
    with torch.cuda.use_mem_pool(pool):
        torch.empty(256 << 20, dtype=torch.uint8, device=dev)
except torch.OutOfMemoryError:
    pass
else:
    raise AssertionError("a MemPool grew past the memory fraction")
torch.cuda.set_per_process_memory_fraction(1.0)
del x, pool
torch.cuda.empty_cache()
after = torch.cuda.memory_stats()
assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"], (before, after)
assert after["reserved_bytes.all.current"] <= before["reserved_bytes.all.current"], (before, after)

# A pool of its own allocator is refused by name.
with tempfile.TemporaryDirectory() as folder:
    source = os.path.join(folder, "alloc.c")
    with open(source, "w") as f:
        f.write("#include <stddef.h>\\nvoid* my_alloc(ptrdiff_t n, int d, void* s) { return 0; }\\n"
                "void my_free(void* p, ptrdiff_t n, int d, void* s) {}\\n")
    library = os.path.join(folder, "alloc.so")
    if subprocess.run(["cc", "-shared", "-fPIC", "-o", library, source]).returncode == 0:
        custom = torch.cuda.memory.CUDAPluggableAllocator(library, "my_alloc", "my_free")
        try:
            torch.cuda.MemPool(custom.allocator())
        except NotImplementedError as e:
            assert "MemPool(allocator=...)" in str(e), e
        else:
            raise AssertionError("a MemPool with its own allocator was not refused")
print("ok")
"""


def test_mem_pools_route_this_threads_allocations_and_give_memory_back():
    seed = str(int.from_bytes(os.urandom(4), "little"))
    out = checked(run_python(MEM_POOL, seed))
    assert out.stdout.strip().endswith("ok"), out.stdout


# Memory history (torch.cuda.memory._record_memory_history): every allocation
# and free in the trace with its Python stack, the segments obtained and given
# back (pages mapped and unmapped in the growable range) adding up to what is
# reserved (a MemPool's included), the stack of each live block in the
# snapshot, and memory_viz renders it.
HISTORY = """
import sys
import torch
import syncmem.torch
from torch.cuda import _memory_viz
syncmem.torch.enable()
rng = torch.Generator().manual_seed(int(sys.argv[1]))
dev = torch.device("cuda")
torch.ones(1, device=dev)

def make(n):
    return torch.empty(n, dtype=torch.uint8, device=dev)

growable = sys.argv[2] == "growable"
reserved_before = torch.cuda.memory_reserved()
torch.cuda.memory._record_memory_history(max_entries=100000)
sizes = [int(torch.randint(1, 8 << 20, (1,), generator=rng)) for _ in range(20)]
tensors = [make(n) for n in sizes]
kept = tensors[::2]
freed = [t.data_ptr() for t in tensors[1::2]]
del tensors
snap = torch.cuda.memory._snapshot()
trace = snap["device_traces"][0]
allocs = {e["addr"] for e in trace if e["action"] == "alloc"}
frees = {e["addr"] for e in trace if e["action"] == "free_completed"}
assert all(t.data_ptr() in allocs for t in kept), "an allocation is missing from the trace"
assert all(p in frees for p in freed), "a free is missing from the trace"
assert all(any(f["name"] == "make" for f in e["frames"]) for e in trace
           if e["action"] == "alloc" and e["addr"] in {t.data_ptr() for t in kept}), "an allocation without its stack"
live = {}
for seg in snap["segments"]:
    addr = seg["address"]
    for b in seg["blocks"]:
        if b["state"] == "active_allocated":
            live[addr] = b
        addr += b["size"]
for t in kept:
    assert t.data_ptr() in live, "a live tensor is not an allocated block"
    assert any(f["name"] == "make" for f in live[t.data_ptr()].get("frames", [])), "a live block without its stack"
assert "<html" in _memory_viz.trace_plot(snap).lower()
assert "<html" in _memory_viz.segment_plot(snap).lower()
# What the allocator took from the device while recording and gave back:
# pages mapped and unmapped in the growable range (as PyTorch's expandable
# segments) and whole segments (small requests' always), adding up to what it
# reserves.
def moved(trace, actions):
    return sum(e["size"] for e in trace if e["action"] in actions)
GOT, GAVE = ("segment_map", "segment_alloc"), ("segment_unmap", "segment_free")
assert any(e["action"] == "segment_map" for e in trace) == growable, "segment_map where there is no growable range"
taken = moved(trace, GOT)
assert taken >= sum(sizes) - reserved_before, (taken, sum(sizes), reserved_before)
assert torch.cuda.memory_reserved() - reserved_before == taken - moved(trace, GAVE)
del kept
torch.cuda.empty_cache()
trace = torch.cuda.memory._snapshot()["device_traces"][0]
assert moved(trace, GAVE) > 0, "nothing given back was recorded"
assert torch.cuda.memory_reserved() - reserved_before == moved(trace, GOT) - moved(trace, GAVE)
# A MemPool's segments are recorded too, and given back when it goes; they
# count in memory_reserved() as well, so the sums still agree.
pool = torch.cuda.MemPool()
with torch.cuda.use_mem_pool(pool):
    inside = make(int(torch.randint(1 << 20, 8 << 20, (1,), generator=rng)))
at = inside.data_ptr()
trace = torch.cuda.memory._snapshot()["device_traces"][0]
assert any(e["action"] in GOT and e["addr"] <= at < e["addr"] + e["size"] for e in trace), "a MemPool's segment unrecorded"
assert torch.cuda.memory_reserved() - reserved_before == moved(trace, GOT) - moved(trace, GAVE)
del inside, pool
torch.cuda.empty_cache()
trace = torch.cuda.memory._snapshot()["device_traces"][0]
assert any(e["action"] in GAVE and e["addr"] <= at < e["addr"] + e["size"] for e in trace), "a MemPool's release unrecorded"
assert torch.cuda.memory_reserved() - reserved_before == moved(trace, GOT) - moved(trace, GAVE)
# So are a CUDA graph's pool's, a large block's and a small one's, as the
# capture grows it and when the graph goes.
def recorded(trace, actions, at):
    return any(e["action"] in actions and e["addr"] <= at < e["addr"] + e["size"] for e in trace)
src = make(int(torch.randint(1 << 20, 8 << 20, (1,), generator=rng)))
g = torch.cuda.CUDAGraph()
torch.cuda.synchronize()
with torch.cuda.graph(g):
    big = src + 1
    small = make(int(torch.randint(1, 1 << 19, (1,), generator=rng)))
torch.cuda.synchronize()
captured = [big.data_ptr(), small.data_ptr()]
trace = torch.cuda.memory._snapshot()["device_traces"][0]
assert all(recorded(trace, GOT, at) for at in captured), "a graph pool's segment unrecorded"
assert torch.cuda.memory_reserved() - reserved_before == moved(trace, GOT) - moved(trace, GAVE)
del big, small, g, src
torch.cuda.synchronize()
torch.cuda.empty_cache()
trace = torch.cuda.memory._snapshot()["device_traces"][0]
assert all(recorded(trace, GAVE, at) for at in captured), "a graph pool's release unrecorded"
assert torch.cuda.memory_reserved() - reserved_before == moved(trace, GOT) - moved(trace, GAVE)
torch.cuda.memory._record_memory_history(enabled=None)
assert not torch.cuda.memory._snapshot()["device_traces"][0], "the trace stays after recording stopped"
print("ok")
"""


@pytest.mark.parametrize("layout", ["growable", "plain"])
def test_memory_history_records_allocations_frees_segments_and_stacks(layout):
    seed = str(int.from_bytes(os.urandom(4), "little"))
    env = {"SYNCMEM_ALLOC_CONF": "expandable:0"} if layout == "plain" else {}
    out = checked(run_python(HISTORY, seed, layout, env=env))
    assert out.stdout.strip().endswith("ok"), out.stdout


# The context levels of _record_memory_history, as PyTorch's allocator keeps
# them: every entry is recorded at every level; stacks of allocations are in
# the trace from "alloc" on, of frees and of what empty_cache gives back at
# "all"; a live block keeps its stack from "state" on; and every entry carries
# the metadata of _set_memory_metadata.
HISTORY_LEVELS = """
import json, sys
import torch
import syncmem.torch
syncmem.torch.enable()
dev = "cuda"
torch.ones(1, device=dev)
rows = int(torch.randint(1024, 4096, (1,), generator=torch.Generator().manual_seed(int(sys.argv[1]))))
for context in ("state", "alloc", "all", None):
    torch.cuda.empty_cache()
    torch.cuda.memory._set_memory_metadata(f"levels {context}")
    torch.cuda.memory._record_memory_history("all", context=context)
    held = []

    def thealloc():
        return torch.rand(rows, 1024, device=dev)  # large: its pages or segment go at empty_cache

    def thefree():
        held.pop()

    x = thealloc()
    held.append(thealloc())
    thefree()
    torch.cuda.empty_cache()
    snap = torch.cuda.memory._snapshot()
    trace, text = snap["device_traces"][0], json.dumps(snap)
    assert any(e["action"] == "alloc" and e["size"] >= rows * 4096 for e in trace), context
    assert ("thealloc" in json.dumps(trace)) == (context in ("alloc", "all")), context
    assert ("thefree" in text) == (context == "all"), context
    assert ("empty_cache" in text) == (context == "all"), context
    live = [b.get("frames", []) for seg in snap["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"]
    assert any(f["name"] == "thealloc" for frames in live for f in frames) == (context is not None), context
    assert all(e["user_metadata"] == f"levels {context}" for e in trace), context
    torch.cuda.memory._record_memory_history(None)
    del x
torch.cuda.memory._set_memory_metadata("")
print("ok")
"""


@pytest.mark.parametrize("layout", ["growable", "plain"])
def test_memory_history_levels_metadata_and_the_stacks_of_frees_and_empty_cache(layout):
    seed = str(int.from_bytes(os.urandom(4), "little"))
    env = {"SYNCMEM_ALLOC_CONF": "expandable:0"} if layout == "plain" else {}
    checked(run_python(HISTORY_LEVELS, seed, env=env))


def test_enable_after_cuda_was_used_raises():
    checked(run_python(TOO_LATE))


# cuDNN's convolutions take only plans whose workspace fits what cacheInfo
# answers: what could be allocated now, as PyTorch's allocator answers.
CACHE_INFO = """
import random, sys
import torch
import syncmem, syncmem.torch
from syncmem import _torch
syncmem.torch.enable()
rng = random.Random(int(sys.argv[1]))
dev = "cuda:0"
MiB = 1 << 20
x = torch.empty(rng.randint(1, 1 << 20), dtype=torch.uint8, device=dev)
# Little cached and no limit: what the device has free.
before = torch.cuda.mem_get_info(0)[0]
info = _torch._cache_info(0)
after = torch.cuda.mem_get_info(0)[0]
assert syncmem.memory_stats(dev)["largest_free_block"] < min(before, after)
assert min(before, after) <= info <= max(before, after), (before, info, after)
# A large free block cached.
big = rng.randint(64, 512) * MiB
t = torch.empty(big, dtype=torch.uint8, device=dev)
del t
stats = syncmem.memory_stats(dev)
assert stats["largest_free_block"] >= big, stats
total = torch.cuda.mem_get_info(0)[1]
def limit_to(headroom):
    fraction = (stats["reserved_bytes"] + headroom) / total
    torch.cuda.set_per_process_memory_fraction(fraction)
    return int(fraction * total)  # as the allocator turns it into bytes
# A limit that leaves less than the block: the block.
limit_to(rng.randint(1, 32) * MiB)
assert _torch._cache_info(0) == stats["largest_free_block"]
# A limit that leaves more: what the limit leaves.
limit = limit_to(stats["largest_free_block"] + rng.randint(1, 1024) * MiB)
assert _torch._cache_info(0) == limit - stats["reserved_bytes"], (_torch._cache_info(0), limit, stats)
# At the limit: the block.
limit_to(0)
assert _torch._cache_info(0) == stats["largest_free_block"]
print("ok")
"""


def test_cache_info_answers_what_could_be_allocated_now():
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed}")
    checked(run_python(CACHE_INFO, str(seed)))
