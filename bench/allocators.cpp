// The allocator suite: how fast and how frugal the caching allocator is,
// beside cudaMalloc (cuda_resource), cudaMallocAsync (cuda_async_resource)
// and, where libtorch and RAPIDS RMM are found, PyTorch's CUDA caching allocator
// and RMM's pool, arena, binning and cuda_async resources, each on the
// same workload in the same run. On emulated devices the alternatives are the
// emulated source resource and the emulated stream-ordered pool, and the
// figures measure the allocators' own host work. The methods are made in
// allocator_methods.cpp; allocator_fit.cpp holds the alloc/fit suite.
//
//   alloc/pair/<method>/<size>       allocate + free of one size on one stream
//   alloc/churn/<method>/64slots     random allocate or free over 64 slots, 256 B..16 MiB (per op)
//   alloc/threads/<method>/<n>threads  64 KiB pairs, each thread on its own stream (items_per_second: pairs/s)
//   alloc/replay/<method>/<trace>    a whole trace; counters peak_reserved, peak_allocated, peak_ratio, ns_per_op
//     traces: training, mixed, synthetic (generated); gpt2, resnet50, infer
//     (recorded from PyTorch programs by bench/python/torch_workloads.py)
//
// Methods: caching, caching_expandable, caching_expandable_from_idle (grow_from_idle:1),
// caching_expandable_from_idle_{8,20}mb (expandable_page_mb), caching_expandable_pages and
// caching_expandable_from_idle_pages (expandable_large_page_mb:0) (ours); cudaMalloc,
// cudaMallocAsync, pytorch (CUDA; or pytorch_expandable with SYNCMEM_BENCH_PYTORCH_EXPANDABLE=1, in a process of its
// own), rmm_pool, rmm_arena, rmm_binning, rmm_cuda_async (CUDA, where RMM is found); emulated, emulated_async
// (emulated).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "allocator_methods.hpp"
#include "allocator_traces.hpp"
#include "bench.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::bench {

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = KiB * KiB;

// Runs `body` and turns an exception into a failed benchmark with its
// message, or a skipped one when the device cannot do what it measures.
template <class F>
void guarded(benchmark::State& state, F&& body) {
  try {
    body();
  } catch (const unsupported_error& e) {
    skip(state, e.what());
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// What a benchmark keeps from one call to the next (Google Benchmark calls it
// again with more iterations, each time timing only the loop): made by the
// first call, so that the warm-up is paid once, and let go between
// benchmarks (bench.hpp). Copies share what they keep.
template <class T>
class kept_per_benchmark {
 public:
  kept_per_benchmark() {
    add_release_hook([held = held_] { held->reset(); });
  }
  template <class Make>
  T& get(Make&& make) {
    if (!*held_) *held_ = make();
    return **held_;
  }

 private:
  std::shared_ptr<std::unique_ptr<T>> held_ = std::make_shared<std::unique_ptr<T>>();
};

// An allocator under test and a stream of its device.
struct allocator_on_stream {
  std::unique_ptr<allocator_under_test> a;
  std::unique_ptr<stream> s;
  allocator_on_stream(const method& m, device_id device)
      : a{m.make(device, false)}, s{std::make_unique<stream>(device)} {}
  allocator_on_stream(const allocator_on_stream&) = delete;
  allocator_on_stream& operator=(const allocator_on_stream&) = delete;
  ~allocator_on_stream() {
    s->synchronize();
    s.reset();  // before the allocator it may have freed memory to
  }
};

void register_pairs(const options& o, const method& m) {
  const device_id device = o.first();
  for (std::size_t bytes : {std::size_t{512}, 64 * KiB, 2 * MiB, 64 * MiB}) {
    const auto name = fmt::format("alloc/pair/{}/{}", m.name, size_name(bytes));
    kept_per_benchmark<allocator_on_stream> kept;
    benchmark::RegisterBenchmark(name.c_str(), [m, device, bytes, kept](benchmark::State& state) mutable {
      guarded(state, [&] {
        auto& [a, s] = kept.get([&] {
          auto made = std::make_unique<allocator_on_stream>(m, device);
          set_current_device(device);
          made->a->deallocate(made->a->allocate(bytes, *made->s), bytes, *made->s);  // the first pair may reserve
          return made;
        });
        set_current_device(device);
        for (auto _ : state) {
          void* p = a->allocate(bytes, *s);
          benchmark::DoNotOptimize(p);
          a->deallocate(p, bytes, *s);
        }
      });
    })->MinTime(o.min_time());
  }
}

// RMM's random_allocations shape: each op picks one of 64 slots and frees it
// if it is taken, else fills it with 256 B..16 MiB (uniform). One op per
// iteration, from a sequence drawn once; the allocator, its live slots and
// its place in the sequence carry over from one call to the next.
void register_churn(const options& o, const method& m) {
  const device_id device = o.first();
  const auto name = fmt::format("alloc/churn/{}/64slots", m.name);
  struct churn : allocator_on_stream {
    std::vector<std::pair<std::uint32_t, std::size_t>> ops;
    std::vector<std::pair<void*, std::size_t>> live;
    std::size_t next = 0;

    churn(const method& m, device_id device) : allocator_on_stream{m, device} {}
    churn(const churn&) = delete;
    churn& operator=(const churn&) = delete;
    ~churn() {
      for (auto& entry : live) {
        if (entry.first != nullptr) a->deallocate(entry.first, entry.second, *s);
      }
    }
    void step() {
      const auto [slot, bytes] = ops[next];
      next = (next + 1) & (ops.size() - 1);
      auto& entry = live[slot];
      if (entry.first != nullptr) {
        a->deallocate(entry.first, entry.second, *s);
        entry = {nullptr, 0};
      } else {
        entry = {a->allocate(bytes, *s), bytes};
      }
    }
  };
  kept_per_benchmark<churn> kept;
  benchmark::RegisterBenchmark(name.c_str(), [m, device, kept](benchmark::State& state) mutable {
    guarded(state, [&] {
      churn& c = kept.get([&] {
        constexpr std::size_t slots = 64;
        auto made = std::make_unique<churn>(m, device);
        std::mt19937_64 random{64};
        made->ops.resize(std::size_t{1} << 14);
        for (auto& op : made->ops) {
          op = {static_cast<std::uint32_t>(random() % slots), 256 + random() % (16 * MiB - 255)};
        }
        made->live.assign(slots, {nullptr, 0});
        set_current_device(device);
        // Reach the steady state untimed (caches filled): the whole sequence
        // once, or 2 s where every op is slow (no cache).
        const auto warm_until = std::chrono::steady_clock::now() + std::chrono::seconds{2};
        for (std::size_t warm = 0; warm < made->ops.size() && std::chrono::steady_clock::now() < warm_until; ++warm) {
          made->step();
        }
        return made;
      });
      set_current_device(device);
      for (auto _ : state) c.step();
    });
  })->MinTime(o.min_time());
}

// n threads, each with its own stream, allocating and freeing 64 KiB. The
// resource and the streams are made by thread 0 before the timed loop (whose
// start every thread waits for) and destroyed after it (whose end they all
// reach first).
void register_threads(const options& o, const method& m) {
  const device_id device = o.first();
  for (int threads : {1, 4, 8}) {
    struct shared_run {
      std::unique_ptr<allocator_under_test> a;
      std::vector<std::unique_ptr<stream>> streams;
      std::string error;
    };
    auto run = std::make_shared<shared_run>();
    const auto name = fmt::format("alloc/threads/{}/{}threads", m.name, threads);
    benchmark::RegisterBenchmark(name.c_str(),
                                 [m, device, run, threads](benchmark::State& state) {
                                   constexpr std::size_t bytes = 64 * KiB;
                                   if (state.thread_index() == 0) {
                                     run->error.clear();
                                     try {
                                       run->a = m.make(device, false);
                                       for (int t = 0; t < threads; ++t)
                                         run->streams.push_back(std::make_unique<stream>(device));
                                     } catch (const std::exception& e) {
                                       run->error = e.what();
                                     }
                                   }
                                   try {
                                     set_current_device(device);
                                   } catch (const std::exception& e) {
                                     state.SkipWithError(e.what());
                                   }
                                   for (auto _ : state) {
                                     if (!run->error.empty()) {
                                       state.SkipWithError(run->error.c_str());
                                       break;
                                     }
                                     stream_view s = *run->streams[static_cast<std::size_t>(state.thread_index())];
                                     void* p = run->a->allocate(bytes, s);
                                     benchmark::DoNotOptimize(p);
                                     run->a->deallocate(p, bytes, s);
                                   }
                                   state.SetItemsProcessed(state.iterations());
                                   if (state.thread_index() == 0) {
                                     for (auto& s : run->streams) s->synchronize();
                                     run->streams.clear();
                                     run->a.reset();
                                   }
                                 })
        ->Threads(threads)
        ->UseRealTime()
        ->MinTime(o.min_time());
  }
}

void register_replay(const options& o, const method& m, std::shared_ptr<const allocation_trace> trace) {
  const device_id device = o.first();
  const auto name = fmt::format("alloc/replay/{}/{}", m.name, trace->name);
  benchmark::RegisterBenchmark(
      name.c_str(),
      [m, device, trace](benchmark::State& state) {
        guarded(state, [&] {
          const auto total = get_memory_info(device).total;
          if (trace->peak_requested() > total) {
            SYNCMEM_UNSUPPORTED(fmt::format("the trace needs {} MiB live, more than the device's {} MiB",
                                            trace->peak_requested() >> 20, total >> 20));
          }
          peaks p;
          std::chrono::steady_clock::duration replaying{};
          for (auto _ : state) {
            auto a = m.make(device, true);
            stream s{device};
            set_current_device(device);
            const auto start = std::chrono::steady_clock::now();
            replay_trace(*a, *trace, s);
            replaying += std::chrono::steady_clock::now() - start;
            p = a->peak();
          }
          state.counters["peak_reserved"] = static_cast<double>(p.reserved);
          state.counters["peak_allocated"] = static_cast<double>(p.allocated);
          state.counters["peak_requested"] = static_cast<double>(trace->peak_requested());
          state.counters["peak_ratio"] =
              p.allocated > 0 ? static_cast<double>(p.reserved) / static_cast<double>(p.allocated) : 0.0;
          // Timed here, in nanoseconds: a rate counter would give seconds, and of CPU time.
          const double ops = static_cast<double>(trace->ops.size()) * static_cast<double>(state.iterations());
          state.counters["ns_per_op"] =
              ops > 0
                  ? static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(replaying).count()) / ops
                  : 0.0;
        });
      })
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

void register_allocator_suite(const options& o) {
  const auto methods = methods_for(o.first());
  for (const auto& m : methods) register_pairs(o, m);
  for (const auto& m : methods) register_churn(o, m);
  for (const auto& m : methods) register_threads(o, m);
  for (const auto& trace : traces_for(o)) {
    for (const auto& m : methods) register_replay(o, m, trace);
  }
}

}  // namespace syncmem::bench
