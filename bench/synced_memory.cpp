// synced_memory: what an access costs when nothing needs copying, and small
// round trips (host write, upload, device write, download) beside the same
// copies made by hand with the raw runtime calls.

#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "bench.hpp"
#include "common/backend.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/stream.hpp"
#include "syncmem/synced_memory.hpp"

#if defined(SYNCMEM_BENCH_HAS_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace syncmem::bench {
namespace {

// ---- accessors on a buffer that needs no copy -----------------------------------

void host_data_synced(benchmark::State& state, device_id device) {
  synced_memory m{4096, device};
  (void)m.mutable_host_data();
  (void)m.device_data();
  m.synchronize();
  for (auto _ : state) benchmark::DoNotOptimize(m.host_data());
}

void device_data_same_stream(benchmark::State& state, device_id device) {
  stream s{device};
  synced_memory m{4096, device};
  (void)m.mutable_host_data();
  (void)m.device_data(s);
  m.synchronize();
  for (auto _ : state) benchmark::DoNotOptimize(m.device_data(s));
}

void mutable_host_data_at_host(benchmark::State& state, device_id device) {
  synced_memory m{4096, device};
  (void)m.mutable_host_data();
  for (auto _ : state) benchmark::DoNotOptimize(m.mutable_host_data());
}

// The floor: reading a pointer out of an object.
void raw_pointer(benchmark::State& state) {
  auto holder = std::make_unique<std::vector<char>>(4096);
  for (auto _ : state) {
    benchmark::DoNotOptimize(holder);
    benchmark::DoNotOptimize(holder->data());
  }
}

// ---- small round trips -------------------------------------------------------------

void roundtrip_synced(benchmark::State& state, device_id device, std::size_t bytes) {
  stream s{device};
  synced_memory m{bytes, device};
  std::vector<char> src(bytes, 1);
  for (auto _ : state) {
    std::memcpy(m.mutable_host_data(), src.data(), bytes);
    benchmark::DoNotOptimize(m.device_data(s));         // upload
    benchmark::DoNotOptimize(m.mutable_device_data(s));  // the device writes it (no kernel)
    benchmark::DoNotOptimize(m.host_data());             // download, and wait for it
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(2 * bytes * state.iterations()));
}

// The same four steps by hand: pinned host buffer, two async copies, one sync.
void roundtrip_raw(benchmark::State& state, device_id device, std::size_t bytes) {
  stream s{device};
  device_guard guard{device};
  auto& backend = detail::backend_for(device);
  void* host = backend.allocate_pinned(bytes, 0);
  void* dev = backend.allocate(device.index(), bytes);
  std::vector<char> src(bytes, 1);
#if defined(SYNCMEM_BENCH_HAS_CUDA)
  if (device.kind() == device_kind::cuda) {
    auto* cs = s.view().native_handle();
    for (auto _ : state) {
      std::memcpy(host, src.data(), bytes);
      cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, cs);
      cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, cs);
      cudaStreamSynchronize(cs);
    }
  }
#endif
  if (device.kind() == device_kind::emulated) {
    for (auto _ : state) {
      std::memcpy(host, src.data(), bytes);
      backend.memcpy_async(dev, host, bytes, device.index(), s.view().native_handle());
      backend.memcpy_async(host, dev, bytes, device.index(), s.view().native_handle());
      s.synchronize();
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(2 * bytes * state.iterations()));
  backend.deallocate(device.index(), dev, bytes);
  backend.deallocate_pinned(host, bytes);
}

}  // namespace

void register_synced_memory_suite(const options& o) {
  const device_id d = o.first();
  const double min_time = o.min_time();
  benchmark::RegisterBenchmark("synced/accessor/syncmem-host_data/synced", host_data_synced, d)->MinTime(min_time);
  benchmark::RegisterBenchmark("synced/accessor/syncmem-device_data/same-stream", device_data_same_stream, d)
      ->MinTime(min_time);
  benchmark::RegisterBenchmark("synced/accessor/syncmem-mutable_host_data/at-host", mutable_host_data_at_host, d)
      ->MinTime(min_time);
  benchmark::RegisterBenchmark("synced/accessor/raw-pointer/any", raw_pointer)->MinTime(min_time);

  const std::string raw = d.kind() == device_kind::cuda ? "cudaMemcpyAsync" : "backend-memcpy";
  std::vector<std::size_t> sizes{4, 64, 1024, 16384, 65536};
  if (o.quick) sizes = {4, 65536};
  for (auto bytes : sizes) {
    benchmark::RegisterBenchmark(fmt::format("synced/roundtrip/syncmem/{}", size_name(bytes)).c_str(),
                                 roundtrip_synced, d, bytes)
        ->MinTime(min_time)
        ->UseRealTime();
    benchmark::RegisterBenchmark(fmt::format("synced/roundtrip/{}/{}", raw, size_name(bytes)).c_str(), roundtrip_raw,
                                 d, bytes)
        ->MinTime(min_time)
        ->UseRealTime();
  }
}

}  // namespace syncmem::bench
