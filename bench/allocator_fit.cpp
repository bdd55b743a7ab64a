// The fit suite: the smallest device-memory limit under which each allocator
// completes a trace, found by bisection on the limit, over the trace's peak
// of requested bytes. What a user feels of fragmentation: whether the model
// fits, not how much is reserved when nothing binds.
//
//   alloc/fit/<method>/<trace>   counters fit_ratio (the limit / peak requested),
//                                fit_limit_mib, peak_requested, tries
//     traces: synthetic (generated, sized to the device); gpt2, resnet50, infer
//     (recorded; left out by --quick) and those of SYNCMEM_BENCH_TRACES
//
// Each try replays the whole trace through a fresh allocator whose own
// reservations stop at the limit, so that what it wastes counts: syncmem's
// caching modes through their limit (caching_options::limit), cudaMallocAsync
// and the emulated pool through their pool's max_pool_size, RMM's pool
// through maximum_pool_size, PyTorch through its per-process memory fraction.
// cudaMalloc and the emulated source, under a limiting_adaptor on the bytes
// asked for, are the reference rows (about 1.00: the search's own precision).
// A try fails when the allocator throws syncmem::out_of_memory (PyTorch's
// and RMM's are turned into one); any other exception fails the benchmark.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "allocator_methods.hpp"
#include "allocator_traces.hpp"
#include "bench.hpp"
#include "fit_search.hpp"
#include "syncmem/device.hpp"
#include "syncmem/emulated.hpp"
#include "syncmem/error.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::bench {

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Fresh emulated memory untouched while it lives, as nothing reads it here:
// filling every new segment with poison would take most of the suite's
// time (about 40 times the replay on the inference trace) and touch host
// memory the size of every limit tried.
class unpoisoned_emulated_memory {
 public:
  explicit unpoisoned_emulated_memory(device_id device)
      : restore_{device.kind() == device_kind::emulated && emulated_device_options().poison} {
    if (restore_) set_emulated_poison(false);
  }
  unpoisoned_emulated_memory(const unpoisoned_emulated_memory&) = delete;
  unpoisoned_emulated_memory& operator=(const unpoisoned_emulated_memory&) = delete;
  ~unpoisoned_emulated_memory() {
    if (restore_) set_emulated_poison(true);
  }

 private:
  bool restore_;
};

// Whether `m`, limited to `limit` bytes, completes `trace`.
bool completes(const method& m, device_id device, const allocation_trace& trace, std::size_t limit) {
  auto a = m.make_limited(device, limit);
  stream s{device};
  set_current_device(device);
  try {
    replay_trace(*a, trace, s);
    return true;
  } catch (const out_of_memory&) {
    return false;
  }
}

void register_fit(const options& o, const method& m, std::shared_ptr<const allocation_trace> trace) {
  const device_id device = o.first();
  const auto name = fmt::format("alloc/fit/{}/{}", m.name, trace->name);
  register_benchmark(name,
                     [m, device, trace](benchmark::State& state) {
                       const std::size_t peak = trace->peak_requested();
                       const std::size_t total = get_memory_info(device).total;
                       if (peak > total) {
                         SYNCMEM_UNSUPPORTED(fmt::format(
                             "the trace needs {} MiB live, more than the device's {} MiB{}", peak >> 20, total >> 20,
                             device.kind() == device_kind::emulated
                                 ? " (SYNCMEM_EMULATED_DEVICES=1 SYNCMEM_EMULATED_MEMORY_MB=81920 gives an emulated "
                                   "device of 80 GiB, whose memory this suite leaves untouched)"
                                 : ""));
                       }
                       // Up to 4x the peak, which every allocator measured so far stays well
                       // under (H100 replays: 2.5 at most), and never past the device; whole
                       // MiB, as RMM's pool takes only multiples of 256 bytes.
                       const std::size_t cap = std::max(std::min(4 * peak, total) / MiB * MiB, peak);
                       // Finer than the differences between allocators, coarse enough to take
                       // about 10 tries.
                       const std::size_t tolerance = std::max(2 * MiB, peak / 200);
                       fit_search_result r;
                       const unpoisoned_emulated_memory unpoisoned{device};
                       for (auto _ : state) {
                         r = find_smallest_fit(peak, cap, tolerance, MiB,
                                               [&](std::size_t limit) { return completes(m, device, *trace, limit); });
                       }
                       if (!r.limit) {
                         SYNCMEM_UNSUPPORTED(fmt::format(
                             "{} does not complete the trace in {} MiB ({:.2f}x its peak of {} MiB)", m.name, cap >> 20,
                             static_cast<double>(cap) / static_cast<double>(peak), peak >> 20));
                       }
                       state.counters["fit_ratio"] = static_cast<double>(*r.limit) / static_cast<double>(peak);
                       state.counters["fit_limit_mib"] = static_cast<double>(*r.limit) / static_cast<double>(MiB);
                       state.counters["peak_requested"] = static_cast<double>(peak);
                       state.counters["tries"] = r.tries;
                     })
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
}

// The methods of a quick run: syncmem's default, and on emulated devices the
// reference (cudaMalloc's, a call per operation, would take seconds per try).
bool in_quick_run(const method& m) { return m.name == "caching" || m.name == "emulated"; }

// The methods of a full run: syncmem's default, its default before it
// compacted, the growable range alone and as syncmem.torch runs it, and every
// peer; the other modes of the range differ from these in time, not in fit.
// cudaMalloc's reference would pay a driver call per operation on every try.
bool in_full_run(const method& m) {
  for (const char* name :
       {"caching", "caching_no_compact", "caching_expandable", "caching_expandable_from_idle", "cudaMallocAsync",
        "rmm_pool", "pytorch", "pytorch_expandable", "emulated", "emulated_async"}) {
    if (m.name == name) return true;
  }
  return false;
}

}  // namespace

void register_allocator_fit_suite(const options& o) {
  std::vector<std::shared_ptr<const allocation_trace>> traces;
  // The synthetic trace's short form: it reaches the same live bytes in a
  // tenth of the operations, which the growable range's moves make costly
  // (a minute per fit on an H200 with the long form).
  traces.push_back(
      std::make_shared<const allocation_trace>(synthetic_trace(get_memory_info(o.first()).total, /*quick=*/true)));
  for (auto& t : recorded_traces(o)) traces.push_back(std::move(t));
  const auto methods = methods_for(o.first());
  for (const auto& trace : traces) {
    for (const auto& m : methods) {
      if (m.make_limited && (o.quick ? in_quick_run(m) : in_full_run(m))) register_fit(o, m, trace);
    }
  }
}

}  // namespace syncmem::bench
