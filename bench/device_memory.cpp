// What `syncmem bench` does between benchmarks: give back what is cached
// process-wide and measure what each device holds (bench.hpp).

#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
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
#include <dlfcn.h>
#include <unistd.h>
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
// NVML, opened at run time (the driver ships it, the toolkit has no header
// for it): the device memory this process holds, which a device-wide count
// mixes with other processes' (ctest -j, another user of the GPU).
class nvml {
 public:
  // The memory `device` holds for this process, when NVML can say.
  std::optional<std::size_t> used_by_this_process(device_id device) {
    if (processes_ == nullptr) return std::nullopt;
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, device.index()) != cudaSuccess) {
      (void)cudaGetLastError();
      return std::nullopt;
    }
    void* handle = nullptr;
    if (by_bus_(bus, &handle) != 0) return std::nullopt;
    std::vector<process_info> infos(1024);
    auto count = static_cast<unsigned>(infos.size());
    if (processes_(handle, &count, infos.data()) != 0) return std::nullopt;
    const auto pid = static_cast<unsigned>(::getpid());
    for (unsigned i = 0; i < count; ++i) {
      // NVML_VALUE_NOT_AVAILABLE where the driver does not count per process.
      if (infos[i].pid == pid && infos[i].used_bytes != ~0ULL) return static_cast<std::size_t>(infos[i].used_bytes);
    }
    return std::nullopt;
  }

  static nvml& instance() {
    static nvml n;
    return n;
  }

 private:
  struct process_info {  // nvmlProcessInfo_v2_t, as nvmlDeviceGetComputeRunningProcesses_v3 fills it
    unsigned pid;
    unsigned long long used_bytes;
    unsigned gpu_instance;
    unsigned compute_instance;
  };
  using init_fn = int (*)();
  using by_bus_fn = int (*)(const char*, void**);
  using processes_fn = int (*)(void*, unsigned*, process_info*);

  nvml() {
    void* library = ::dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (library == nullptr) return;
    auto init = reinterpret_cast<init_fn>(::dlsym(library, "nvmlInit_v2"));
    by_bus_ = reinterpret_cast<by_bus_fn>(::dlsym(library, "nvmlDeviceGetHandleByPciBusId_v2"));
    auto processes = reinterpret_cast<processes_fn>(::dlsym(library, "nvmlDeviceGetComputeRunningProcesses_v3"));
    if (init != nullptr && by_bus_ != nullptr && processes != nullptr && init() == 0) processes_ = processes;
  }
  by_bus_fn by_bus_ = nullptr;
  processes_fn processes_ = nullptr;
};

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
    std::size_t used = 0;
    bool whole_device = true;
#if defined(SYNCMEM_BENCH_HAS_CUDA)
    if (d.kind() == device_kind::cuda) {
      if (const auto mine = nvml::instance().used_by_this_process(d)) {
        used = *mine;
        whole_device = false;
      }
    }
#endif
    if (whole_device) {
      const memory_info m = get_memory_info(d);
      used = m.total - m.free;
    }
    {
      const std::lock_guard lock{kept().mutex};
      const auto it = kept().bytes.find(d);
      if (it != kept().bytes.end()) used -= std::min(used, it->second);
    }
    use.push_back({d, used, whole_device});
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
