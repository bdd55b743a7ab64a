// Where a staged copy's time goes (not part of `syncmem bench`): the engine's
// pipeline rebuilt from its parts (its chunk plan, the host copy pool's job,
// one pinned block of staging buffers, a DMA per chunk), with a timing event
// around each DMA and the host clock at the end of each chunk's host copy,
// beside the engine's own copy_async of the same bytes, twice in a row (the
// second finds the staging as the first left it). It prints, per chunk,
// when its host copy ended and when its DMA ran, and how long the link stood
// idle between DMAs; for downloads also when the caller, polling the chunk's
// event before it helps copy the chunk out, saw its DMA complete. Host times count from just before the first event is
// recorded on an idle stream, so they run a few microseconds ahead of the
// event times. On emulated devices the figures are the host's.
//
//   transfer_timeline up|down [size_kib] [rounds] [pause_us]
//
// pause_us: how long to wait between rounds (the pool's threads fall asleep
// after 100 us without work, as between sporadic copies); 0 runs them back to
// back. The engine's copy_options are its defaults.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/event.hpp"
#include "syncmem/mr/caching_pinned_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/stream.hpp"
#include "transfer/copy_internal.hpp"
#include "transfer/host_copy_pool.hpp"

namespace {

using namespace syncmem;
using detail::host_copy_pool;
using clock_type = std::chrono::steady_clock;

double microseconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

void dma(void* dst, const void* src, std::size_t bytes, stream_view s) {
  device_guard guard{s.device()};
  detail::backend_for(s.device()).memcpy_async(dst, src, bytes, s.device().index(), s.handle());
}

std::size_t arg(int argc, char** argv, int i, std::size_t fallback) {
  return argc > i ? std::strtoull(argv[i], nullptr, 10) : fallback;
}

struct round_record {
  double total = 0;   // us, the rebuilt pipeline
  double engine = 0;  // us, copy_async of the same bytes
  double again = 0;   // us, the same copy_async right after it
  std::vector<double> host_done;
  std::vector<double> landed;  // downloads: when the caller saw the chunk's DMA complete
  std::vector<double> dma_start;
  std::vector<double> dma_end;
};

}  // namespace

int main(int argc, char** argv) {
  const bool up = argc < 2 || std::string_view{argv[1]} != "down";
  const std::size_t bytes = arg(argc, argv, 2, 64 * 1024) << 10;
  const int rounds = static_cast<int>(std::max<std::size_t>(1, arg(argc, argv, 3, 4)));
  const auto pause = std::chrono::microseconds{arg(argc, argv, 4, 0)};
  const device_id device = current_device();
  stream own{device};
  const stream_view s = own;
  const copy_options options = get_copy_options();
  // As the engine: short downloads demote the staging lines they read, with
  // more threads, downloads over 8 MiB up to 32 MiB copy out with ordinary
  // stores, and uploads over 2 MiB write their later chunks with ordinary
  // stores (staging_pacer.hpp).
  const bool demoting = !up && detail::staging_pacer::demotes_download(bytes);
  const int threads = up ? detail::staging_pacer::upload_threads(bytes, options)
                         : detail::staging_pacer::download_threads(bytes, options);

  std::vector<std::byte> pageable(bytes, std::byte{1});
  auto& device_memory = mr::get_per_device_resource(device);
  auto* on_device = static_cast<std::byte*>(device_memory.allocate(bytes, s));
  std::size_t largest = 0;
  const auto chunks = detail::staging_pacer::plan_chunks(
      bytes, options,
      up ? detail::staging_pacer::growth::by_half : detail::staging_pacer::growth::doubling_then_halving, largest);
  const std::size_t count = detail::staging_pacer::ring_buffers(options, chunks.size());
  auto& staging = staging_resource(device.kind());
  auto* block = static_cast<std::byte*>(staging.allocate(count * largest, s));
  const auto buffer = [&](std::size_t c) { return block + (c % count) * largest; };
  std::vector<event> marks;  // before and after each DMA, then the start
  for (std::size_t i = 0; i < 2 * chunks.size() + 1; ++i) marks.emplace_back(device, event_options{.timing = true});
  std::vector<std::optional<event>> ring_events(count);
  const auto ring_event = [&](std::size_t c) -> event& {
    auto& e = ring_events[c % count];
    if (!e) e.emplace(device);
    return *e;
  };

  std::printf(
      "%s: %s of %zu KiB in %zu chunks (largest %zu KiB), %zu buffers, %d threads%s, %lld us between "
      "rounds\n",
      to_string(device).c_str(), up ? "upload" : "download", bytes >> 10, chunks.size(), largest >> 10, count, threads,
      demoting ? ", demoting" : "", static_cast<long long>(pause.count()));
  std::vector<round_record> records;
  const int warm = 2;  // threads, staging, pages
  for (int round = 0; round < warm + rounds; ++round) {
    round_record r;
    r.host_done.resize(chunks.size());
    r.landed.resize(chunks.size());
    s.synchronize();
    std::this_thread::sleep_for(pause);
    const auto t0 = clock_type::now();
    marks.back().record(s);
    {
      host_copy_pool::instance().wake(threads);
      const auto dir = up ? host_copy_pool::job::direction::to_staging : host_copy_pool::job::direction::from_staging;
      host_copy_pool::job job{host_copy_pool::instance(),     dir,    up ? nullptr : pageable.data(),
                              up ? pageable.data() : nullptr, chunks, threads};
      if (!up && !demoting) job.keep_staging_lines();
      if (!up && detail::staging_pacer::download_ordinary_stores(bytes)) job.copy_out_with_ordinary_stores();
      if (up && bytes > detail::staging_thresholds{}.ordinary_stores_above) {  // as the engine writes its staging
        const auto stores = detail::staging_pacer::upload_stores(bytes, chunks.size());
        job.set_stores(stores.ordinary_from, stores.demoted_from);
      }
      const auto timed_dma = [&](std::size_t i) {
        marks[2 * i].record(s);
        if (up) {
          dma(on_device + chunks[i].offset, buffer(i), chunks[i].bytes, s);
        } else {
          dma(buffer(i), on_device + chunks[i].offset, chunks[i].bytes, s);
        }
        marks[2 * i + 1].record(s);
      };
      if (up) {
        for (std::size_t i = 0; i < count; ++i) job.open(i, buffer(i), nullptr);
      } else {
        for (std::size_t i = 0; i < count; ++i) {
          timed_dma(i);
          ring_event(i).record(s);
          job.open(i, buffer(i), &ring_event(i));
        }
      }
      for (std::size_t i = 0; i < chunks.size(); ++i) {
        if (!up) {  // the caller polls the chunk's event (the pool threads may be copying it already)
          while (!ring_event(i).ready()) {}
          r.landed[i] = microseconds_since(t0);
        }
        job.finish(i);
        r.host_done[i] = microseconds_since(t0);
        if (up) timed_dma(i);
        if (i + count < chunks.size()) {
          if (!up) timed_dma(i + count);
          ring_event(i).record(s);
          job.open(i + count, buffer(i), &ring_event(i));
        }
      }
    }
    s.synchronize();
    r.total = microseconds_since(t0);
    std::this_thread::sleep_for(pause);
    const auto engine_copy = [&] {
      const auto e0 = clock_type::now();
      if (up) {
        (void)copy_async(on_device, pageable.data(), bytes, s);
      } else {
        (void)copy_async(pageable.data(), on_device, bytes, s);
      }
      s.synchronize();
      return microseconds_since(e0);
    };
    r.engine = engine_copy();
    r.again = engine_copy();
    if (round < warm) continue;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      r.dma_start.push_back(1e3 * static_cast<double>(event::elapsed_ms(marks.back(), marks[2 * i])));
      r.dma_end.push_back(1e3 * static_cast<double>(event::elapsed_ms(marks.back(), marks[2 * i + 1])));
    }
    records.push_back(std::move(r));
  }

  for (std::size_t n = 0; n < records.size(); ++n) {
    const auto& r = records[n];
    const auto rate = [&](double us) { return static_cast<double>(bytes) / us / 1e3; };
    std::printf(
        "round %zu: %.0f us, %.1f GB/s; the engine's copy_async: %.0f us, %.1f GB/s, again %.0f us, %.1f GB/s\n", n,
        r.total, rate(r.total), r.engine, rate(r.engine), r.again, rate(r.again));
    double busy = 0;
    double idle = 0;
    double previous_end = 0;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      const double start = r.dma_start[i];
      const double end = r.dma_end[i];
      busy += end - start;
      idle += start - previous_end;
      if (chunks.size() <= 12 || i < 6 || i + 3 >= chunks.size() || i % 4 == 0) {
        char landed[48] = "";
        if (!up) std::snprintf(landed, sizeof landed, "landed seen %8.1f us, ", r.landed[i]);
        std::printf(
            "  chunk %3zu %6zu KiB: %shost copy done %8.1f us; DMA %8.1f .. %8.1f us, %5.1f GB/s, idle before "
            "%6.1f us\n",
            i, chunks[i].bytes >> 10, landed, r.host_done[i], start, end,
            static_cast<double>(chunks[i].bytes) / (end - start) / 1e3, start - previous_end);
      }
      previous_end = end;
    }
    std::printf("  link busy %.0f us, idle %.0f us\n", busy, idle);
  }

  staging.deallocate(block, count * largest, s);
  device_memory.deallocate(on_device, bytes, s);
  return 0;
}
