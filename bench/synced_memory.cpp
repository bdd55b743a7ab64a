// synced_memory: what an access costs when nothing needs copying, and small
// round trips (host write, upload, device write, download) beside the same
// copies made by hand with the raw runtime calls, measured in alternation.

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "bench.hpp"
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

// Both round trips run in every benchmark, one after the other, and only the
// benchmark's own is timed: each measures while the other keeps the driver,
// the link and the CPU in the same state, since run one after the other their
// figures swung with whichever ran first.
class roundtrip_pair {
 public:
  roundtrip_pair(device_id device, std::size_t bytes)
      : device_{device}, bytes_{bytes}, s_{device}, m_{bytes, device}, src_(bytes, 1) {
    device_guard guard{device};
    auto& backend = detail::backend_for(device);
    host_ = backend.allocate_pinned(bytes, 0);
    dev_ = backend.allocate(device.index(), bytes);
  }
  roundtrip_pair(const roundtrip_pair&) = delete;
  roundtrip_pair& operator=(const roundtrip_pair&) = delete;
  ~roundtrip_pair() {
    s_.synchronize();
    auto& backend = detail::backend_for(device_);
    backend.deallocate(device_.index(), dev_, bytes_);
    backend.deallocate_pinned(host_, bytes_);
  }

  void synced() {
    std::memcpy(m_.mutable_host_data(), src_.data(), bytes_);
    benchmark::DoNotOptimize(m_.device_data(s_));          // upload
    benchmark::DoNotOptimize(m_.mutable_device_data(s_));  // the device writes it (no kernel)
    benchmark::DoNotOptimize(m_.host_data());              // download, and wait for it
  }

  // The same four steps by hand: pinned host buffer, two async copies, one sync.
  void raw() {
    std::memcpy(host_, src_.data(), bytes_);
#if defined(SYNCMEM_BENCH_HAS_CUDA)
    if (device_.kind() == device_kind::cuda) {
      auto* cs = s_.view().native_handle();
      cudaMemcpyAsync(dev_, host_, bytes_, cudaMemcpyHostToDevice, cs);
      cudaMemcpyAsync(host_, dev_, bytes_, cudaMemcpyDeviceToHost, cs);
      cudaStreamSynchronize(cs);
      return;
    }
#endif
    auto& backend = detail::backend_for(device_);
    backend.memcpy_async(dev_, host_, bytes_, device_.index(), s_.view().handle());
    backend.memcpy_async(host_, dev_, bytes_, device_.index(), s_.view().handle());
    s_.synchronize();
  }

 private:
  device_id device_;
  std::size_t bytes_;
  stream s_;
  synced_memory m_;
  std::vector<char> src_;
  void* host_ = nullptr;
  void* dev_ = nullptr;
};

void roundtrip(benchmark::State& state, device_id device, std::size_t bytes, bool ours) {
  roundtrip_pair pair{device, bytes};
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    ours ? pair.raw() : pair.synced();  // untimed: the other one
    const auto start = clock::now();
    ours ? pair.synced() : pair.raw();
    state.SetIterationTime(std::chrono::duration<double>(clock::now() - start).count());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(2 * bytes * state.iterations()));
}

}  // namespace

void register_synced_memory_suite(const options& o) {
  const device_id d = o.first();
  const double min_time = o.min_time();
  register_benchmark("synced/accessor/syncmem-host_data/synced", host_data_synced, d)->MinTime(min_time);
  register_benchmark("synced/accessor/syncmem-device_data/same-stream", device_data_same_stream, d)->MinTime(min_time);
  register_benchmark("synced/accessor/syncmem-mutable_host_data/at-host", mutable_host_data_at_host, d)
      ->MinTime(min_time);
  register_benchmark("synced/accessor/raw-pointer/any", raw_pointer)->MinTime(min_time);

  const std::string raw = d.kind() == device_kind::cuda ? "cudaMemcpyAsync" : "backend-memcpy";
  std::vector<std::size_t> sizes{4, 64, 1024, 16384, 65536};
  if (o.quick) sizes = {4, 65536};
  for (auto bytes : sizes) {
    register_benchmark(fmt::format("synced/roundtrip/syncmem/{}", size_name(bytes)).c_str(), roundtrip, d, bytes, true)
        ->MinTime(min_time)
        ->UseManualTime();
    register_benchmark(fmt::format("synced/roundtrip/{}/{}", raw, size_name(bytes)).c_str(), roundtrip, d, bytes, false)
        ->MinTime(min_time)
        ->UseManualTime();
  }
}

}  // namespace syncmem::bench
