// Where a staged upload's time goes (not part of `syncmem bench`): the
// engine's upload pipeline rebuilt from its parts (the host copy pool's job,
// one pinned block of staging buffers, a DMA per chunk), with a timing event
// around each DMA and the host clock at the end of each chunk's host copy. It
// prints, per chunk, when its host copy ended and when its DMA ran, and how
// long the link stood idle between DMAs. On emulated devices the figures
// are the host's. Rounds are apart (the pool's threads fall asleep between
// them), as sporadic uploads are; back-to-back ones find them awake.
//
//   upload_timeline [size_mib] [max_chunk_mib] [buffers] [threads]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "common/backend.hpp"
#include "common/host_copy_pool.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/event.hpp"
#include "syncmem/mr/caching_pinned_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/stream.hpp"

namespace {

using namespace syncmem;
using detail::host_copy_pool;
using clock_type = std::chrono::steady_clock;

double microseconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

void dma(void* dst, const void* src, std::size_t bytes, stream_view s) {
  device_guard guard{s.device()};
  detail::backend_for(s.device()).memcpy_async(dst, src, bytes, s.device().index(), s.native_handle());
}

std::size_t arg(int argc, char** argv, int i, std::size_t fallback) {
  return argc > i ? std::strtoull(argv[i], nullptr, 10) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t bytes = arg(argc, argv, 1, 64) << 20;
  const std::size_t max_chunk = arg(argc, argv, 2, 4) << 20;
  const std::size_t buffers = std::max<std::size_t>(1, arg(argc, argv, 3, 8));
  const int threads = static_cast<int>(arg(argc, argv, 4, static_cast<std::size_t>(host_copy_pool::default_threads())));
  const device_id device = current_device();
  stream own{device};
  const stream_view s = own;

  std::vector<std::byte> pageable(bytes, std::byte{1});
  auto& device_memory = mr::get_per_device_resource(device);
  auto* dst = static_cast<std::byte*>(device_memory.allocate(bytes, s));
  std::vector<host_copy_pool::job::chunk> chunks;
  for (std::size_t offset = 0, n = std::min<std::size_t>(512 << 10, max_chunk); offset < bytes;
       offset += n, n = std::min(2 * n, max_chunk)) {
    chunks.push_back({offset, std::min(n, bytes - offset)});
  }
  const std::size_t count = std::min(buffers, chunks.size());
  auto& staging = staging_resource(device.kind());
  auto* block = static_cast<std::byte*>(staging.allocate(count * max_chunk, s));
  const auto buffer = [&](std::size_t c) { return block + (c % count) * max_chunk; };
  std::vector<event> marks;  // before and after each DMA, then the start
  for (std::size_t i = 0; i < 2 * chunks.size() + 1; ++i) marks.emplace_back(device, event_options{.timing = true});
  std::vector<std::optional<event>> sent(count);

  std::printf("%s: upload of %zu MiB, chunks up to %zu MiB, %zu buffers, %d threads\n", to_string(device).c_str(),
              bytes >> 20, max_chunk >> 20, count, threads);
  for (int round = 0; round < 4; ++round) {
    std::vector<double> host_done(chunks.size());
    s.synchronize();
    const auto t0 = clock_type::now();
    marks.back().record(s);
    {
      host_copy_pool::instance().wake(threads);
      host_copy_pool::job job{host_copy_pool::instance(), host_copy_pool::job::direction::to_staging, nullptr,
                              pageable.data(), chunks, threads};
      for (std::size_t i = 0; i < count; ++i) job.open(i, buffer(i), nullptr);
      for (std::size_t i = 0; i < chunks.size(); ++i) {
        job.finish(i);
        host_done[i] = microseconds_since(t0);
        marks[2 * i].record(s);
        dma(dst + chunks[i].offset, buffer(i), chunks[i].bytes, s);
        marks[2 * i + 1].record(s);
        if (i + count < chunks.size()) {
          auto& e = sent[i % count];
          if (!e) e.emplace(device);
          e->record(s);
          job.open(i + count, buffer(i), &*e);
        }
      }
    }
    s.synchronize();
    const double total = microseconds_since(t0);
    if (round < 2) continue;  // warm: threads, staging, pages
    std::printf("round %d: %.0f us, %.1f GB/s\n", round, total, static_cast<double>(bytes) / total / 1e3);
    double busy = 0;
    double idle = 0;
    double previous_end = 0;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      const double start = 1e3 * static_cast<double>(event::elapsed_ms(marks.back(), marks[2 * i]));
      const double end = 1e3 * static_cast<double>(event::elapsed_ms(marks.back(), marks[2 * i + 1]));
      busy += end - start;
      idle += start - previous_end;
      if (i < 6 || i + 3 >= chunks.size() || i % 4 == 0) {
        std::printf("  chunk %3zu %6zu KiB: host copy done %8.1f us; DMA %8.1f .. %8.1f us, %5.1f GB/s, idle before %6.1f us\n",
                    i, chunks[i].bytes >> 10, host_done[i], start, end,
                    static_cast<double>(chunks[i].bytes) / (end - start) / 1e3, start - previous_end);
      }
      previous_end = end;
    }
    std::printf("  link busy %.0f us, idle %.0f us\n", busy, idle);
  }

  staging.deallocate(block, count * max_chunk, s);
  device_memory.deallocate(dst, bytes, s);
  return 0;
}
