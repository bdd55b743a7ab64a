// The allocator suite: how fast and how frugal the caching allocator is,
// beside cudaMalloc (cuda_resource), cudaMallocAsync (cuda_async_resource)
// and, where libtorch and RAPIDS RMM are found, PyTorch's CUDA caching allocator
// and RMM's pool, arena, binning and cuda_async resources, each on the
// same workload in the same run. On emulated devices the alternatives are the
// emulated source resource and the emulated stream-ordered pool, and the
// figures measure the allocators' own host work.
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

#include "allocator_traces.hpp"
#include "bench.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/cuda_async_resource.hpp"
#include "syncmem/mr/cuda_resource.hpp"
#include "syncmem/mr/emulated_resource.hpp"
#include "syncmem/mr/logging_adaptor.hpp"
#include "syncmem/mr/statistics_adaptor.hpp"
#include "syncmem/stream.hpp"

#ifdef SYNCMEM_BENCH_HAS_TORCH
#include "torch/torch_bridge.hpp"
#endif
#ifdef SYNCMEM_BENCH_HAS_RMM
#include "rmm/rmm_bridge.hpp"
#endif

namespace syncmem::bench {

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = KiB * KiB;

struct peaks {
  std::size_t reserved = 0;
  std::size_t allocated = 0;
};

// An allocator as the benchmarks drive it.
class allocator_under_test {
 public:
  allocator_under_test() = default;
  allocator_under_test(const allocator_under_test&) = delete;
  allocator_under_test& operator=(const allocator_under_test&) = delete;
  virtual ~allocator_under_test() = default;
  virtual void* allocate(std::size_t bytes, stream_view s) = 0;
  virtual void deallocate(void* p, std::size_t bytes, stream_view s) = 0;
  // The peaks since it was made (replay), with what was reserved and allocated
  // counted as the allocator itself counts them.
  virtual peaks peak() = 0;
};

// A syncmem memory resource; `counted` adds a statistics_adaptor where the
// resource keeps no peaks itself (used by the replays only).
class resource_under_test final : public allocator_under_test {
 public:
  resource_under_test(std::unique_ptr<mr::memory_resource> r, bool counted)
      : resource_{std::move(r)},
        counted_{counted ? std::make_unique<mr::statistics_adaptor>(*resource_) : nullptr},
        use_{counted_ ? static_cast<mr::memory_resource*>(counted_.get()) : resource_.get()} {}
  void* allocate(std::size_t bytes, stream_view s) override { return use_->allocate(bytes, s); }
  void deallocate(void* p, std::size_t bytes, stream_view s) override { use_->deallocate(p, bytes, s); }
  peaks peak() override {
    if (auto* caching = dynamic_cast<mr::caching_resource*>(resource_.get())) {
      const auto st = caching->statistics();
      return {st.peak_reserved_bytes, st.peak_allocated_bytes};
    }
    if (auto* async = dynamic_cast<mr::cuda_async_resource*>(resource_.get())) {
      const auto st = async->statistics();
      return {st.peak_reserved_bytes, st.peak_used_bytes};
    }
    if (counted_) {  // every allocation straight from the device: what is allocated is reserved
      const auto bytes = static_cast<std::size_t>(counted_->statistics().bytes.peak);
      return {bytes, bytes};
    }
    return {};
  }

 private:
  std::unique_ptr<mr::memory_resource> resource_;
  std::unique_ptr<mr::statistics_adaptor> counted_;
  mr::memory_resource* use_;
};

#ifdef SYNCMEM_BENCH_HAS_TORCH
// PyTorch's allocator, emptied and with its peaks reset when made, and
// emptied again when done with, so that runs do not see each other's cache.
class torch_under_test final : public allocator_under_test {
 public:
  torch_under_test(device_id device, bool expandable) : device_{device} {
    char error[512] = {};
    if (!torch_bridge::init(error, sizeof error)) SYNCMEM_UNSUPPORTED(fmt::format("PyTorch's allocator: {}", error));
    set_current_device(device);
    torch_bridge::empty_cache();
    if (!torch_bridge::set_expandable(expandable, error, sizeof error)) {
      SYNCMEM_UNSUPPORTED(fmt::format("PyTorch refuses expandable_segments:{}: {}", expandable, error));
    }
    torch_bridge::reset_peaks(device.index());
  }
  // Expandable segments stay on: PyTorch does not support switching them
  // once it has allocated, and the process that measures them measures
  // nothing else.
  ~torch_under_test() override { torch_bridge::empty_cache(); }
  void* allocate(std::size_t bytes, stream_view s) override {
    void* p = torch_bridge::allocate(bytes, s.native_handle());
    if (p == nullptr) throw std::bad_alloc{};
    return p;
  }
  void deallocate(void* p, std::size_t, stream_view) override { torch_bridge::deallocate(p); }
  peaks peak() override {
    peaks out;
    (void)torch_bridge::peaks(device_.index(), &out.reserved, &out.allocated);
    return out;
  }

 private:
  device_id device_;
};
#endif

#ifdef SYNCMEM_BENCH_HAS_RMM
// One of RAPIDS RMM's resources, made fresh for each run; counted (a
// statistics adaptor on top) for the replays only.
class rmm_under_test final : public allocator_under_test {
 public:
  rmm_under_test(const char* kind, device_id device, bool counted) {
    char error[512] = {};
    resource_ = rmm_bridge::create(kind, device.index(), counted, error, sizeof error);
    if (resource_ == nullptr) SYNCMEM_UNSUPPORTED(fmt::format("RMM's {} resource: {}", kind, error));
  }
  ~rmm_under_test() override { rmm_bridge::destroy(resource_); }
  void* allocate(std::size_t bytes, stream_view s) override {
    return rmm_bridge::allocate(resource_, bytes, s.native_handle());
  }
  void deallocate(void* p, std::size_t bytes, stream_view s) override {
    rmm_bridge::deallocate(resource_, p, bytes, s.native_handle());
  }
  peaks peak() override {
    peaks out;
    rmm_bridge::peaks(resource_, &out.reserved, &out.allocated);
    return out;
  }

 private:
  void* resource_ = nullptr;
};
#endif

struct method {
  std::string name;
  std::function<std::unique_ptr<allocator_under_test>(device_id device, bool for_replay)> make;
};

std::vector<method> methods_for(device_id device) {
  std::vector<method> methods;
  methods.push_back({"caching", [](device_id d, bool) {
                       return std::make_unique<resource_under_test>(std::make_unique<mr::caching_resource>(d), false);
                     }});
  const auto caching_with = [&methods](std::string name, std::string conf) {
    methods.push_back({std::move(name), [conf = std::move(conf)](device_id d, bool) {
                         return std::make_unique<resource_under_test>(
                             std::make_unique<mr::caching_resource>(d, mr::caching_options::parse(conf)), false);
                       }});
  };
  caching_with("caching_expandable", "expandable:1");
  // The growable range keeping its reserve near its peak in use, and the same
  // with larger pages: fewer driver calls per byte grown or moved.
  caching_with("caching_expandable_from_idle", "expandable:1,grow_from_idle:1");
  for (const int page_mb : {8, 20}) {
    caching_with(fmt::format("caching_expandable_from_idle_{}mb", page_mb),
                 fmt::format("expandable:1,grow_from_idle:1,expandable_page_mb:{}", page_mb));
  }
  // Pages only, without the large pages of large growths (20 MiB by default).
  caching_with("caching_expandable_pages", "expandable:1,expandable_large_page_mb:0");
  caching_with("caching_expandable_from_idle_pages", "expandable:1,grow_from_idle:1,expandable_large_page_mb:0");
  if (device.kind() == device_kind::cuda) {
    methods.push_back({"cudaMalloc", [](device_id d, bool replay) {
                         return std::make_unique<resource_under_test>(std::make_unique<mr::cuda_resource>(d), replay);
                       }});
    methods.push_back({"cudaMallocAsync", [](device_id d, bool) {
                         return std::make_unique<resource_under_test>(std::make_unique<mr::cuda_async_resource>(d),
                                                                      false);
                       }});
#ifdef SYNCMEM_BENCH_HAS_RMM
    for (const char* kind : {"pool", "arena", "binning", "cuda_async"}) {
      methods.push_back({fmt::format("rmm_{}", kind), [kind](device_id d, bool replay) {
                           return std::make_unique<rmm_under_test>(kind, d, replay);
                         }});
    }
#endif
#ifdef SYNCMEM_BENCH_HAS_TORCH
    // PyTorch cannot switch to expandable segments once it has allocated, so
    // its expandable mode is measured in a process of its own:
    // SYNCMEM_BENCH_PYTORCH_EXPANDABLE=1 registers it instead of the default mode.
    if (const char* e = std::getenv("SYNCMEM_BENCH_PYTORCH_EXPANDABLE"); e != nullptr && std::string{e} == "1") {
      methods.push_back(
          {"pytorch_expandable", [](device_id d, bool) { return std::make_unique<torch_under_test>(d, true); }});
    } else {
      methods.push_back({"pytorch", [](device_id d, bool) { return std::make_unique<torch_under_test>(d, false); }});
    }
#endif
  } else {
    methods.push_back({"emulated", [](device_id d, bool replay) {
                         return std::make_unique<resource_under_test>(std::make_unique<mr::emulated_resource>(d),
                                                                      replay);
                       }});
    methods.push_back({"emulated_async", [](device_id d, bool) {
                         return std::make_unique<resource_under_test>(std::make_unique<mr::cuda_async_resource>(d),
                                                                      false);
                       }});
  }
  return methods;
}

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
            std::vector<void*> slots(trace->slots, nullptr);
            for (const auto& op : trace->ops) {
              if (op.allocate) {
                slots[op.slot] = a->allocate(op.size, s);
              } else {
                a->deallocate(slots[op.slot], op.size, s);
              }
            }
            s.synchronize();
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

// The generated traces, the real ones committed in bench/traces (unpacked
// into the build tree at configure time; not in a quick run, as their size
// is fixed), and those named in SYNCMEM_BENCH_TRACES (comma-separated files
// in the replay format or written by mr::logging_adaptor).
std::vector<std::shared_ptr<const allocation_trace>> traces_for(const options& o) {
  const auto memory = get_memory_info(o.first()).total;
  std::vector<std::shared_ptr<const allocation_trace>> traces;
  traces.push_back(std::make_shared<const allocation_trace>(training_trace(memory, o.quick)));
  traces.push_back(std::make_shared<const allocation_trace>(mixed_trace(memory, o.quick)));
  traces.push_back(std::make_shared<const allocation_trace>(synthetic_trace(memory, o.quick)));
  std::vector<std::string> files;
#ifdef SYNCMEM_BENCH_TRACE_DIR
  if (!o.quick && std::filesystem::is_directory(SYNCMEM_BENCH_TRACE_DIR)) {
    for (const auto& entry : std::filesystem::directory_iterator{SYNCMEM_BENCH_TRACE_DIR}) {
      if (entry.path().extension() == ".replay") files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
  }
#endif
  if (const char* list = std::getenv("SYNCMEM_BENCH_TRACES"); list != nullptr && *list != '\0') {
    std::stringstream names{list};
    std::string path;
    while (std::getline(names, path, ',')) {
      if (!path.empty()) files.push_back(path);
    }
  }
  for (const auto& path : files) traces.push_back(std::make_shared<const allocation_trace>(load_trace_file(path)));
  return traces;
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
