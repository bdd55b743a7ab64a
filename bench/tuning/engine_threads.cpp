// The engine's pageable copy at several host thread counts (not part of
// `syncmem bench`): each count's copy alternates with one DMA of pinned
// memory, and the counts take turns copy by copy, starting one later each
// round, so that the machine's drift falls on all of them alike. Before each
// timed copy the same count copies once untimed, so that its threads are
// awake as they are in a program that copies at one count. It prints, per
// count, the median copy time and its share of the pinned DMA's speed: the
// median of five blocks of rounds (min..max of the blocks). A count of 0 is
// the engine's own choice (staging_pacer::upload_threads, download_threads).
//
//   engine_threads up|down size_mib count,count,... [rounds]

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/event.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/mr/pinned_resource.hpp"
#include "syncmem/stream.hpp"

namespace {

using namespace syncmem;

constexpr std::size_t blocks = 5;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int> parse_counts(const char* text) {
  std::vector<int> out;
  std::stringstream in{text};
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: engine_threads up|down size_mib count,count,... [rounds]\n");
    return 2;
  }
  const bool up = std::string_view{argv[1]} != "down";
  const std::size_t bytes = std::strtoull(argv[2], nullptr, 10) << 20;
  const std::vector<int> counts = parse_counts(argv[3]);
  const std::size_t rounds = std::max<std::size_t>(blocks, argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 100);
  if (bytes == 0 || counts.empty()) {
    std::fprintf(stderr, "engine_threads: a size of at least 1 MiB and one count, please\n");
    return 2;
  }
  const device_id device = current_device();
  stream own{device};
  const stream_view s = own;
  mr::pinned_resource pinned_resource{device.kind()};
  auto& device_resource = mr::get_per_device_resource(device);
  void* pinned = pinned_resource.allocate(bytes, s);
  void* on_device = device_resource.allocate(bytes, s);
  std::vector<char> pageable(bytes, 1);
  std::memset(pinned, 2, bytes);
  event before{device, event_options{.timing = true}};
  event after{device, event_options{.timing = true}};

  // Microseconds of one copy: the pinned DMA (count < 0) or the engine's.
  const auto timed = [&](int count) {
    s.synchronize();
    before.record(s);
    if (count < 0) {
      const device_guard guard{device};
      void* dst = up ? on_device : pinned;
      const void* src = up ? pinned : on_device;
      detail::backend_for(device).memcpy_async(dst, src, bytes, device.index(), s.handle());
    } else {
      copy_options o = get_copy_options();
      o.host_threads = count;
      void* dst = up ? on_device : static_cast<void*>(pageable.data());
      const void* src = up ? static_cast<const void*>(pageable.data()) : on_device;
      (void)copy_async(dst, src, bytes, s, o);
    }
    after.record(s);
    s.synchronize();
    return 1e3 * static_cast<double>(event::elapsed_ms(before, after));
  };

  std::vector<std::vector<double>> engine(counts.size());
  std::vector<std::vector<double>> floor(counts.size());      // the pinned DMA just before each
  for (std::size_t round = 0; round < rounds + 2; ++round) {  // two rounds to warm up
    for (std::size_t j = 0; j < counts.size(); ++j) {
      const std::size_t i = (j + round) % counts.size();
      (void)timed(counts[i]);
      const double p = timed(-1);
      const double e = timed(counts[i]);
      if (round < 2) continue;
      floor[i].push_back(p);
      engine[i].push_back(e);
    }
  }

  std::printf("%s: %s of %zu MiB, engine from pageable memory beside a pinned DMA, %zu rounds\n",
              to_string(device).c_str(), up ? "upload" : "download", bytes >> 20, rounds);
  for (std::size_t i = 0; i < counts.size(); ++i) {
    std::vector<double> shares;
    const std::size_t per = rounds / blocks;
    for (std::size_t b = 0; b < blocks; ++b) {
      const auto from = static_cast<std::ptrdiff_t>(b * per);
      const auto to = static_cast<std::ptrdiff_t>((b + 1) * per);
      shares.push_back(median({floor[i].begin() + from, floor[i].begin() + to}) /
                       median({engine[i].begin() + from, engine[i].begin() + to}));
    }
    const auto [lo, hi] = std::minmax_element(shares.begin(), shares.end());
    const double pinned_us = median(floor[i]);
    std::printf("  threads %2d%-18s: %8.1f us, pinned %8.1f us (%5.1f GB/s), of pinned %.3f (%.3f..%.3f)\n", counts[i],
                counts[i] == 0 ? " (engine's choice)" : "", median(engine[i]), pinned_us,
                static_cast<double>(bytes) / pinned_us / 1e3, median(shares), *lo, *hi);
  }
  device_resource.deallocate(on_device, bytes, s);
  pinned_resource.deallocate(pinned, bytes, s);
  return 0;
}
