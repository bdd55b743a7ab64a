// What `syncmem bench` does between benchmarks: give back what is cached
// process-wide and measure what each device holds (bench.hpp).

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "bench.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/stream.hpp"

#if defined(SYNCMEM_BENCH_HAS_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace syncmem::bench {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

struct kept_memory {
  std::mutex mutex;
  std::map<device_id, std::size_t> bytes;
  std::vector<std::function<void()>> release_hooks;
};

kept_memory& kept() {
  static auto* const k = new kept_memory;  // never destroyed: suites may keep memory until exit
  return *k;
}

std::vector<device_id> every_device() {
  std::vector<device_id> devices;
  for (const device_kind kind : {device_kind::cuda, device_kind::emulated}) {
    for (int i = 0; i < device_count(kind); ++i) devices.push_back(device_id{kind, i});
  }
  return devices;
}

#if defined(SYNCMEM_BENCH_HAS_CUDA)
// cudaMallocAsync's default pool and the graph allocations of replayed
// graphs keep their memory until trimmed.
void trim_cuda_pools(device_id d) {
  const device_guard guard{d};
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, d.index()) == cudaSuccess) (void)cudaMemPoolTrimTo(pool, 0);
  (void)cudaDeviceGraphMemTrim(d.index());
  (void)cudaGetLastError();  // a device without pools or graph memory has nothing to trim
}
#endif

}  // namespace

std::vector<device_memory_use> release_cached_memory() {
  std::vector<std::function<void()>> hooks;
  {
    const std::lock_guard lock{kept().mutex};
    hooks = kept().release_hooks;
  }
  for (const auto& release : hooks) release();
  std::vector<device_memory_use> use;
  for (const device_id d : every_device()) {
    mr::default_resource(d).empty_cache();  // synchronises the device
#if defined(SYNCMEM_BENCH_HAS_CUDA)
    if (d.kind() == device_kind::cuda) trim_cuda_pools(d);
#endif
    const memory_info m = get_memory_info(d);
    std::size_t used = m.total - m.free;
    {
      const std::lock_guard lock{kept().mutex};
      const auto it = kept().bytes.find(d);
      if (it != kept().bytes.end()) used -= std::min(used, it->second);
    }
    use.push_back({d, used});
  }
  return use;
}

std::size_t leak_allowance(device_id device) { return device.kind() == device_kind::emulated ? 0 : 64 * MiB; }

void keep_device_memory(device_id device, std::size_t bytes) {
  const std::lock_guard lock{kept().mutex};
  kept().bytes[device] += bytes;
}

void add_release_hook(std::function<void()> release) {
  const std::lock_guard lock{kept().mutex};
  kept().release_hooks.push_back(std::move(release));
}

void register_leak_selftest(const options& o) {
  const char* text = std::getenv("SYNCMEM_BENCH_LEAK_MB");
  if (text == nullptr || *text == '\0') return;
  const std::size_t mb = std::strtoull(text, nullptr, 10);
  const device_id device = o.first();
  register_benchmark(fmt::format("selftest/leak/syncmem/{}MiB", mb), [device, mb](benchmark::State& state) {
    // Straight from the backend, past every cache, and never freed.
    const device_guard guard{device};
    (void)detail::backend_for(device).allocate(device.index(), mb * MiB);
    for (auto _ : state) benchmark::DoNotOptimize(mb);
  })->Iterations(1);
}

}  // namespace syncmem::bench
