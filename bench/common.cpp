#include <fmt/format.h>

#include "bench.hpp"
#include "syncmem/device.hpp"
#include "syncmem/emulated.hpp"

namespace syncmem::bench {

bool options::gpu() const { return !devices.empty() && devices.front().kind() == device_kind::cuda; }

options default_options(bool quick) {
  options o;
  o.quick = quick;
  for (int i = 0; i < device_count(device_kind::cuda); ++i) o.devices.push_back(device_id::cuda(i));
  if (o.devices.empty()) {
    if (device_count(device_kind::emulated) == 0) {
      auto e = emulated_device_options();
      e.device_count = 1;
      enable_emulated_devices(e);
    }
    o.devices.push_back(device_id::emulated(0));
  }
  return o;
}

double expected_seconds(std::string_view name, const options& o) {
  // A replay runs its whole trace once per method, whatever the minimum time;
  // every other benchmark runs to its minimum time a few times over (Google
  // Benchmark's estimate of the iterations) after its setup. Fitted to quick
  // (0.11 s each) and full (0.5 s each) runs on an emulated device.
  if (name.starts_with("alloc/replay/")) return o.quick ? 0.4 : 1.5;
  // A fit replays its trace about 10 times, each under a limit: 0.01-0.5 s on
  // the 2 GiB emulated device (the recorded traces past 1 GiB are skipped
  // there), seconds on a GPU, where every page the growable range maps is a
  // driver call.
  if (name.starts_with("alloc/fit/")) return o.gpu() ? (o.quick ? 2.0 : 8.0) : (o.quick ? 0.1 : 0.4);
  return 0.09 + 2.05 * o.min_time();
}

std::string size_name(std::size_t bytes) {
  if (bytes >= (std::size_t{1} << 30) && bytes % (std::size_t{1} << 30) == 0) return fmt::format("{}GiB", bytes >> 30);
  if (bytes >= (std::size_t{1} << 20) && bytes % (std::size_t{1} << 20) == 0) return fmt::format("{}MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{}KiB", bytes >> 10);
  return fmt::format("{}B", bytes);
}

void register_all(const options& o) {
  register_leak_selftest(o);  // first, so that a test sees the benchmarks after it not blamed
  register_transfer_suite(o);
  register_allocator_suite(o);
  register_allocator_fit_suite(o);
  register_synced_memory_suite(o);
  register_memcpy_suite(o);
  register_tensor_suite(o);
  register_batch_suite(o);
  register_graph_suite(o);
#if defined(SYNCMEM_BENCH_HAS_NCCL)
  register_nccl_suite(o);
#endif
}

}  // namespace syncmem::bench
