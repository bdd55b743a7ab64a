// The transfer suite: what the transfer engine and the caching pinned resource
// are measured against, side by side in one run.
//
//   transfer/h2d|d2h/<method>/<size>   bandwidth against size. On CUDA:
//       cudaMemcpyAsync-pinned (the floor), cudaMemcpy-pageable (what code
//       without pinned memory gets), engine (ours, from/to pageable memory),
//       engine-pinned (ours on pinned memory: the engine's own overhead);
//       uploads from 64 MiB also engine-streaming (the staging written with
//       streaming stores only) and engine-ordinary (the middle chunks of every
//       upload with ordinary stores), see detail::staging_thresholds.
//       On emulated devices: backend-pinned, backend-pageable, engine.
//   transfer/h2d-interleaved|d2h-interleaved/engine/<size>   from 1 MiB: the
//       engine's copies alternating one by one with the floor's (pinned
//       memory), so that both meet the machine in the same state; counters
//       of_pinned (the floor's median copy time over the engine's) and
//       pinned_GBps. Runs of the separate benchmarks above lie seconds apart,
//       and on the lent machines the link and host memory drift over seconds.
//   transfer/h2d-interleaved|d2h-interleaved/pinned-chunks/<size>   on CUDA,
//       1-64 MiB: the engine's chunk plan as one DMA per chunk from pinned
//       memory, no host copies, against one DMA of it all: what splitting a
//       copy costs the link, a floor under the engine's of_pinned.
//   transfer/d2d/<method>/<size>       device to device on one device
//   transfer/peer/<method>/<size>      between two devices (when there are two)
//   transfer/first-touch/<method>/<size>      upload of freshly allocated,
//       never touched pageable memory; first-touch-d2h: download into it
//   pinned/pair/<method>/<size>        allocate + free: caching (freed on a
//       stream: one event), caching-host (deallocate_host_only), against
//       cudaMallocHost/cudaFreeHost (pinned_resource on emulated devices)
//
// Device work is timed with events on CUDA (manual time); emulated streams run
// on host threads, so there the host clock times the copy and its completion.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "bench.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/event.hpp"
#include "syncmem/mr/caching_pinned_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/mr/pinned_resource.hpp"
#include "syncmem/stream.hpp"
#include "transfer/copy_internal.hpp"
#include "transfer/staging_pacer.hpp"

#if defined(SYNCMEM_BENCH_HAS_CUDA)
#include <cuda_runtime_api.h>

#include "syncmem/cuda/interop.hpp"
#endif

namespace syncmem::bench {
namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr std::size_t GiB = 1024 * MiB;

// Times one iteration of device work on `s`.
class stopwatch {
 public:
  explicit stopwatch(stream_view s)
      : s_{s}, begin_{s.device(), event_options{.timing = true}}, end_{s.device(), event_options{.timing = true}} {}
  void start() {
    if (on_gpu()) {
      begin_.record(s_);
    } else {
      s_.synchronize();
      t0_ = std::chrono::steady_clock::now();
    }
  }
  // Seconds since start(), once the work enqueued on the stream has completed.
  double stop() {
    if (on_gpu()) {
      end_.record(s_);
      end_.synchronize();
      return static_cast<double>(event::elapsed_ms(begin_, end_)) / 1e3;
    }
    s_.synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  [[nodiscard]] bool on_gpu() const { return s_.device().kind() == device_kind::cuda; }
  stream_view s_;
  event begin_;
  event end_;
  std::chrono::steady_clock::time_point t0_{};
};

// Runs `once` a first time to warm up, then times it each iteration and
// counts `bytes` moved per iteration.
template <class Once>
void time_copies(benchmark::State& state, stopwatch& watch, stream_view s, std::size_t bytes, Once&& once) {
  once();
  s.synchronize();
  for (auto _ : state) {
    watch.start();
    once();
    state.SetIterationTime(watch.stop());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}

// The host memory one size's benchmarks copy between, kept from one benchmark
// to the next of the same size (pinning 1 GiB takes most of a second). Host
// memory only: device memory is each benchmark's own (buffers), so
// that none is left on the device when a benchmark ends.
struct host_buffers {
  host_buffers(device_id d, std::size_t n) : device{d}, bytes{n}, pinned_source{d.kind()} {
    pinned = pinned_source.allocate(n, default_stream(d));
    pageable.reset(new std::byte[n]);
    std::memset(pageable.get(), 1, n);  // touched: first touch is measured on its own
    std::memset(pinned, 2, n);
  }
  ~host_buffers() { pinned_source.deallocate(pinned, bytes, default_stream(device)); }
  host_buffers(const host_buffers&) = delete;
  host_buffers& operator=(const host_buffers&) = delete;

  device_id device;
  std::size_t bytes;
  mr::pinned_resource pinned_source;
  void* pinned = nullptr;
  std::unique_ptr<std::byte[]> pageable;
};

host_buffers& host_buffers_for(device_id d, std::size_t n) {
  static std::unique_ptr<host_buffers> current;
  if (!current || current->device != d || current->bytes != n) {
    current.reset();  // free the last size first
    current = std::make_unique<host_buffers>(d, n);
  }
  return *current;
}

// The memory one benchmark copies between: two device buffers of its own,
// from the device's default resource, and the host buffers of its size.
struct buffers {
  buffers(device_id d, std::size_t n) : host{host_buffers_for(d, n)}, device{d}, bytes{n} {
    auto& dev = mr::get_per_device_resource(d);
    device_a = dev.allocate(n, default_stream(d));
    try {
      device_b = dev.allocate(n, default_stream(d));
    } catch (...) {
      dev.deallocate(device_a, n, default_stream(d));
      throw;
    }
    pinned = host.pinned;
    pageable = host.pageable.get();
  }
  ~buffers() {
    auto& dev = mr::get_per_device_resource(device);
    dev.deallocate(device_a, bytes, default_stream(device));
    dev.deallocate(device_b, bytes, default_stream(device));
  }
  buffers(const buffers&) = delete;
  buffers& operator=(const buffers&) = delete;

  host_buffers& host;
  device_id device;
  std::size_t bytes;
  void* device_a = nullptr;
  void* device_b = nullptr;
  void* pinned = nullptr;
  std::byte* pageable = nullptr;
};

// The backend's own copy (an emulated device's "DMA"), the baseline where there is no CUDA.
void backend_copy(void* dst, const void* src, std::size_t n, stream_view s) {
  device_guard guard{s.device()};
  detail::backend_for(s.device()).memcpy_async(dst, src, n, s.device().index(), s.handle());
}

enum class direction { h2d, d2h };

void run_bandwidth(benchmark::State& state, device_id d, std::size_t n, direction dir, const std::string& method) {
  const buffers b{d, n};
  stream own{d};
  const stream_view s = own;
  const bool h2d = dir == direction::h2d;
  void* host = method.find("pinned") != std::string::npos ? b.pinned : b.pageable;
  void* dst = h2d ? b.device_a : host;
  const void* src = h2d ? host : b.device_a;
  stopwatch watch{method == "cudaMemcpy-pageable" ? default_stream(d) : s};
  const copy_options options = get_copy_options();
  detail::staging_thresholds stores;  // the engine with its staging written one way only
  stores.ordinary_stores_above = method == "engine-ordinary" ? 1 : std::numeric_limits<std::size_t>::max();
  auto once = [&] {
    if (method == "engine" || method == "engine-pinned") {
      // Complete once the stream reaches the point after the call (staged and
      // small downloads to pageable memory are complete at return), which the
      // stopwatch waits for: no second wait, as for cudaMemcpyAsync.
      (void)copy_async(dst, src, n, s);
    } else if (method == "engine-streaming" || method == "engine-ordinary") {
      (void)detail::copy_async_with(dst, src, n, s, options, stores);
#if defined(SYNCMEM_BENCH_HAS_CUDA)
    } else if (method == "cudaMemcpyAsync-pinned") {
      SYNCMEM_CUDA_TRY(
          cudaMemcpyAsync(dst, src, n, h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, cuda::native(s)));
    } else if (method == "cudaMemcpy-pageable") {
      SYNCMEM_CUDA_TRY(cudaMemcpy(dst, src, n, h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
#endif
    } else {
      backend_copy(dst, src, n, s);
    }
  };
  time_copies(state, watch, s, n, once);  // warm: the engine's staging blocks, the driver's staging buffers
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

// The engine against the floor copy by copy (see the list at the top): pinned
// memory through the backend's own copy (cudaMemcpyAsync on CUDA), then
// pageable memory through the engine, or the engine's chunks as DMAs of pinned
// memory (method pinned-chunks), each timed alone. The iteration time is ours.
void run_interleaved(benchmark::State& state, device_id d, std::size_t n, direction dir, const std::string& method) {
  const buffers b{d, n};
  stream own{d};
  const stream_view s = own;
  const bool h2d = dir == direction::h2d;
  stopwatch watch{s};
  const auto pinned_dma = [&](std::size_t offset, std::size_t bytes) {
    auto* dst = static_cast<std::byte*>(h2d ? b.device_a : b.pinned) + offset;
    const auto* src = static_cast<const std::byte*>(h2d ? b.pinned : b.device_a) + offset;
#if defined(SYNCMEM_BENCH_HAS_CUDA)
    if (d.kind() == device_kind::cuda) {
      SYNCMEM_CUDA_TRY(
          cudaMemcpyAsync(dst, src, bytes, h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, cuda::native(s)));
      return;
    }
#endif
    backend_copy(dst, src, bytes, s);
  };
  std::size_t largest = 0;
  const auto chunks = detail::staging_pacer::plan_chunks(
      n, get_copy_options(),
      h2d ? detail::staging_pacer::growth::by_half : detail::staging_pacer::growth::doubling_then_halving, largest);
  auto engine_copy = [&] {
    if (method == "pinned-chunks") {
      for (const auto& c : chunks) pinned_dma(c.offset, c.bytes);
      return;
    }
    (void)copy_async(h2d ? b.device_a : b.pageable, h2d ? b.pageable : b.device_a, n, s);
  };
  auto pinned_copy = [&] { pinned_dma(0, n); };
  engine_copy();  // warm, as in run_bandwidth
  pinned_copy();
  s.synchronize();
  std::vector<double> engine_times;
  std::vector<double> floor_times;
  for (auto _ : state) {
    watch.start();
    pinned_copy();
    floor_times.push_back(watch.stop());
    watch.start();
    engine_copy();
    engine_times.push_back(watch.stop());
    state.SetIterationTime(engine_times.back());
  }
  const double engine_median = median(engine_times);
  const double floor_median = median(floor_times);
  if (engine_median > 0 && floor_median > 0) {
    state.counters["of_pinned"] = floor_median / engine_median;
    state.counters["pinned_GBps"] = static_cast<double>(n) / floor_median / 1e9;
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(n));
}

void run_d2d(benchmark::State& state, device_id d, std::size_t n, const std::string& method) {
  const buffers b{d, n};
  stream own{d};
  const stream_view s = own;
  stopwatch watch{s};
  auto once = [&] {
    if (method == "engine") {
      (void)copy_async(b.device_b, b.device_a, n, s);
#if defined(SYNCMEM_BENCH_HAS_CUDA)
    } else if (method == "cudaMemcpyAsync") {
      SYNCMEM_CUDA_TRY(cudaMemcpyAsync(b.device_b, b.device_a, n, cudaMemcpyDeviceToDevice, cuda::native(s)));
#endif
    } else {
      backend_copy(b.device_b, b.device_a, n, s);
    }
  };
  time_copies(state, watch, s, n, once);  // bytes copied, each of them read and written
}

#if defined(SYNCMEM_BENCH_HAS_CUDA)
void enable_peer_access(device_id a, device_id b) {
  for (const auto& [self, peer] : {std::pair{a, b}, std::pair{b, a}}) {
    int can = 0;
    SYNCMEM_CUDA_TRY(cudaDeviceCanAccessPeer(&can, self.index(), peer.index()));
    if (can == 0) continue;
    const device_guard guard{self};
    const cudaError_t rc = cudaDeviceEnablePeerAccess(peer.index(), 0);
    if (rc == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();  // enabled by an earlier benchmark or the engine
    } else {
      SYNCMEM_CUDA_TRY(rc);
    }
  }
}
#endif

void run_peer(benchmark::State& state, device_id from, device_id to, std::size_t n, const std::string& method) {
  auto& src = mr::get_per_device_resource(from);
  auto& dst = mr::get_per_device_resource(to);
  void* a = src.allocate(n, default_stream(from));
  void* b = dst.allocate(n, default_stream(to));
#if defined(SYNCMEM_BENCH_HAS_CUDA)
  // The alternative as a careful user writes it: with peer access on where the
  // devices have it (without, the driver stages the copy through host memory).
  if (method == "cudaMemcpyPeerAsync") enable_peer_access(from, to);
#endif
  {
    stream own{from};
    const stream_view s = own;
    stopwatch watch{s};
    auto once = [&] {
      if (method == "engine") {
        (void)copy_async(b, a, n, s);
#if defined(SYNCMEM_BENCH_HAS_CUDA)
      } else if (method == "cudaMemcpyPeerAsync") {
        SYNCMEM_CUDA_TRY(cudaMemcpyPeerAsync(b, to.index(), a, from.index(), n, cuda::native(s)));
#endif
      } else {
        backend_copy(b, a, n, s);
      }
    };
    time_copies(state, watch, s, n, once);
  }
  src.deallocate(a, n, default_stream(from));
  dst.deallocate(b, n, default_stream(to));
}

// Fresh pageable memory each iteration: large enough that malloc maps new
// pages for it, never written before the copy.
void run_first_touch(benchmark::State& state, device_id d, std::size_t n, direction dir, const std::string& method) {
  auto& dev = mr::get_per_device_resource(d);
  void* device_memory = dev.allocate(n, default_stream(d));
  {
    stream own{d};
    const stream_view s = own;
    const bool h2d = dir == direction::h2d;
    stopwatch watch{method == "engine" ? s : default_stream(d)};
    for (auto _ : state) {
      std::unique_ptr<std::byte[]> fresh{new std::byte[n]};
      void* dst = h2d ? device_memory : fresh.get();
      const void* src = h2d ? static_cast<const void*>(fresh.get()) : device_memory;
      watch.start();
      if (method == "engine") {
        copy_async(dst, src, n, s).wait();
#if defined(SYNCMEM_BENCH_HAS_CUDA)
      } else if (method == "cudaMemcpy") {
        SYNCMEM_CUDA_TRY(cudaMemcpy(dst, src, n, h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
#endif
      } else {
        backend_copy(dst, src, n, default_stream(d));
      }
      state.SetIterationTime(watch.stop());
      benchmark::DoNotOptimize(fresh.get());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(n));
  }
  dev.deallocate(device_memory, n, default_stream(d));
}

void run_pinned_pair(benchmark::State& state, device_id d, std::size_t n, const std::string& method) {
  stream own{d};
  const stream_view s = own;
  if (method == "caching" || method == "caching-host") {
    mr::caching_pinned_resource cache{d.kind()};
    cache.deallocate_host_only(cache.allocate(n, s), n);  // pinned once, before timing
    const bool host_only = method == "caching-host";
    for (auto _ : state) {
      void* p = cache.allocate(n, s);
      benchmark::DoNotOptimize(p);
      if (host_only) {
        cache.deallocate_host_only(p, n);
      } else {
        cache.deallocate(p, n, s);
      }
    }
    const auto stats = cache.statistics();
    state.counters["hit_rate"] =
        static_cast<double>(stats.hits) / static_cast<double>(std::max<std::uint64_t>(1, stats.allocations));
    state.counters["blocks"] = static_cast<double>(stats.bytes_pinned / mr::caching_pinned_resource::block_size(n));
    return;
  }
#if defined(SYNCMEM_BENCH_HAS_CUDA)
  if (method == "cudaMallocHost") {
    for (auto _ : state) {
      void* p = nullptr;
      SYNCMEM_CUDA_TRY(cudaMallocHost(&p, n));
      benchmark::DoNotOptimize(p);
      SYNCMEM_CUDA_TRY(cudaFreeHost(p));
    }
    return;
  }
#endif
  mr::pinned_resource pinned{d.kind()};
  for (auto _ : state) {
    void* p = pinned.allocate(n, s);
    benchmark::DoNotOptimize(p);
    pinned.deallocate(p, n, s);
  }
}

}  // namespace

void register_transfer_suite(const options& o) {
  const device_id d = o.first();
  const bool gpu = o.gpu();
  std::vector<std::size_t> sizes;
  if (o.quick) {
    sizes = {64 * KiB, 1 * MiB, 64 * MiB};
  } else {
    // 4 KiB .. 1 GiB on a GPU; emulated devices stop at 256 MiB (host memory, host time).
    for (std::size_t n = 4 * KiB; n <= (gpu ? 1 * GiB : 256 * MiB); n *= 4) sizes.push_back(n);
  }
  const std::vector<std::string> methods =
      gpu ? std::vector<std::string>{"cudaMemcpyAsync-pinned", "cudaMemcpy-pageable", "engine", "engine-pinned"}
          : std::vector<std::string>{"backend-pinned", "backend-pageable", "engine"};
  const std::vector<std::string> d2d_methods = {gpu ? "cudaMemcpyAsync" : "backend", "engine"};

  for (const std::size_t n : sizes) {
    for (const auto dir : {direction::h2d, direction::d2h}) {
      auto these = methods;
      if (gpu && dir == direction::h2d && n >= 64 * MiB) {
        these.insert(these.end(), {"engine-streaming", "engine-ordinary"});
      }
      for (const auto& method : these) {
        const auto name = fmt::format("transfer/{}/{}/{}", dir == direction::h2d ? "h2d" : "d2h", method, size_name(n));
        register_benchmark(name.c_str(),
                           [d, n, dir, method](benchmark::State& s) { run_bandwidth(s, d, n, dir, method); })
            ->UseManualTime()
            ->MinTime(o.min_time())
            ->Unit(benchmark::kMicrosecond);
      }
    }
    if (n >= 1 * MiB) {
      std::vector<std::string> interleaved = {"engine"};
      if (gpu && n <= 64 * MiB) interleaved.emplace_back("pinned-chunks");
      for (const auto dir : {direction::h2d, direction::d2h}) {
        for (const auto& method : interleaved) {
          const auto name =
              fmt::format("transfer/{}-interleaved/{}/{}", dir == direction::h2d ? "h2d" : "d2h", method, size_name(n));
          register_benchmark(name.c_str(),
                             [d, n, dir, method](benchmark::State& s) { run_interleaved(s, d, n, dir, method); })
              ->UseManualTime()
              ->MinTime(o.min_time())
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
    if (!o.quick || n == 64 * MiB) {
      for (const auto& method : d2d_methods) {
        register_benchmark(fmt::format("transfer/d2d/{}/{}", method, size_name(n)).c_str(),
                           [d, n, method](benchmark::State& s) { run_d2d(s, d, n, method); })
            ->UseManualTime()
            ->MinTime(o.min_time())
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }

  if (o.devices.size() >= 2) {
    const device_id to = o.devices[1];
    for (const std::size_t n : o.quick ? std::vector<std::size_t>{64 * MiB} : sizes) {
      for (const std::string method : {gpu ? "cudaMemcpyPeerAsync" : "backend", "engine"}) {
        register_benchmark(fmt::format("transfer/peer/{}/{}", method, size_name(n)).c_str(),
                           [d, to, n, method](benchmark::State& s) { run_peer(s, d, to, n, method); })
            ->UseManualTime()
            ->MinTime(o.min_time())
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }

  const std::size_t touch = o.quick ? 64 * MiB : 256 * MiB;
  for (const auto dir : {direction::h2d, direction::d2h}) {
    for (const std::string method : {gpu ? "cudaMemcpy" : "backend", "engine"}) {
      register_benchmark(fmt::format("transfer/{}/{}/{}", dir == direction::h2d ? "first-touch" : "first-touch-d2h",
                                     method, size_name(touch))
                             .c_str(),
                         [d, touch, dir, method](benchmark::State& s) { run_first_touch(s, d, touch, dir, method); })
          ->UseManualTime()
          ->MinTime(o.min_time())
          ->Unit(benchmark::kMillisecond);
    }
  }

  const std::vector<std::size_t> pair_sizes =
      o.quick ? std::vector<std::size_t>{4 * KiB} : std::vector<std::size_t>{512, 4 * KiB, 64 * KiB, 1 * MiB, 64 * MiB};
  for (const std::size_t n : pair_sizes) {
    for (const std::string method : {"caching", "caching-host", gpu ? "cudaMallocHost" : "pinned_resource"}) {
      register_benchmark(fmt::format("pinned/pair/{}/{}", method, size_name(n)).c_str(),
                         [d, n, method](benchmark::State& s) { run_pinned_pair(s, d, n, method); })
          ->MinTime(o.min_time())
          ->Unit(benchmark::kNanosecond);
    }
  }
}

}  // namespace syncmem::bench
