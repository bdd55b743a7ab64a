// Tuning the transfer engine on a machine with a GPU (not part of `syncmem
// bench`): the host's copy ceilings (pageable to pinned, ordinary and
// streaming stores, 1..N threads), the engine's host copy pool at 1..16
// threads, and the engine's pageable bandwidth over a grid of copy_options,
// each printed as one line.
//
//   engine_tuning [size_kib] [threads,...] [max_chunk_mib,...] [buffers,...] [min_chunk_kib,...]

#include <emmintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "syncmem/copy.hpp"
#include "syncmem/device.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/mr/pinned_resource.hpp"
#include "transfer/host_copy_pool.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

std::vector<int> parse_list(const char* text, std::vector<int> fallback) {
  if (text == nullptr) return fallback;
  std::vector<int> out;
  std::stringstream in{text};
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

void stream_copy(void* dst, const void* src, std::size_t bytes) {
  auto* d = static_cast<__m128i*>(dst);
  const auto* s = static_cast<const __m128i*>(src);
  const std::size_t n = bytes / 64;
  for (std::size_t i = 0; i < n; ++i) {
    const __m128i a = _mm_loadu_si128(s + 4 * i);
    const __m128i b = _mm_loadu_si128(s + 4 * i + 1);
    const __m128i c = _mm_loadu_si128(s + 4 * i + 2);
    const __m128i e = _mm_loadu_si128(s + 4 * i + 3);
    _mm_stream_si128(d + 4 * i, a);
    _mm_stream_si128(d + 4 * i + 1, b);
    _mm_stream_si128(d + 4 * i + 2, c);
    _mm_stream_si128(d + 4 * i + 3, e);
  }
  std::memcpy(static_cast<char*>(dst) + n * 64, static_cast<const char*>(src) + n * 64, bytes - n * 64);
  _mm_sfence();
}

// GB/s of `threads` threads each copying its slice, best of three.
double host_ceiling(void* dst, const void* src, std::size_t bytes, int threads, bool streaming) {
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    const auto start = clock_type::now();
    std::vector<std::thread> pool;
    const std::size_t slice = bytes / static_cast<std::size_t>(threads) / 4096 * 4096;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([=] {
        const std::size_t offset = static_cast<std::size_t>(t) * slice;
        const std::size_t n = t == threads - 1 ? bytes - offset : slice;
        if (streaming) {
          stream_copy(static_cast<char*>(dst) + offset, static_cast<const char*>(src) + offset, n);
        } else {
          std::memcpy(static_cast<char*>(dst) + offset, static_cast<const char*>(src) + offset, n);
        }
      });
    }
    for (auto& t : pool) t.join();
    const double s = std::chrono::duration<double>(clock_type::now() - start).count();
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
  }
  return best;
}

// Microseconds the engine's host copy pool takes for `bytes`, the median of
// 200 rounds: out of pinned memory a DMA has just written (a download's host
// side), or into it (an upload's).
double pool_microseconds(void* pageable, void* pinned, void* dev, std::size_t bytes, int threads, bool out,
                         syncmem::stream_view s) {
  auto& pool = syncmem::detail::host_copy_pool::instance();
  std::vector<double> times;
  for (int round = 0; round < 220; ++round) {
    if (out) syncmem::copy(pinned, dev, bytes, s);
    pool.wake(threads);
    const auto start = clock_type::now();
    if (out) {
      pool.copy(pageable, pinned, bytes, threads);
    } else {
      pool.copy(pinned, pageable, bytes, threads);
    }
    const double t = std::chrono::duration<double, std::micro>(clock_type::now() - start).count();
    if (!out) syncmem::copy(dev, pinned, bytes, s);
    if (round >= 20) times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// GB/s of the engine's copy: the median of many rounds for small sizes, the
// best of three for large ones.
double engine_bandwidth(void* dst, const void* src, std::size_t bytes, syncmem::stream_view s,
                        const syncmem::copy_options& o) {
  syncmem::copy(dst, src, bytes, s, o);  // warm: staging buffers, threads
  const std::size_t rounds = std::clamp<std::size_t>((std::size_t{256} << 20) / bytes, 3, 301);
  std::vector<double> rates;
  for (std::size_t round = 0; round < rounds; ++round) {
    const auto start = clock_type::now();
    syncmem::copy(dst, src, bytes, s, o);
    const double t = std::chrono::duration<double>(clock_type::now() - start).count();
    rates.push_back(static_cast<double>(bytes) / t / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rounds == 3 ? rates.back() : rates[rates.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t kib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256 * 1024;
  const auto threads = parse_list(argc > 2 ? argv[2] : nullptr, {4, 8, 12, 16});
  const auto chunks = parse_list(argc > 3 ? argv[3] : nullptr, {4, 8, 16, 32});
  const auto buffers = parse_list(argc > 4 ? argv[4] : nullptr, {2, 3, 4});
  const auto first_chunks = parse_list(argc > 5 ? argv[5] : nullptr, {256});
  const std::size_t bytes = kib << 10;
  const auto device = syncmem::current_device();
  auto s = syncmem::default_stream(device);

  std::vector<char> pageable(bytes, 1);
  std::vector<char> back(bytes, 2);
  syncmem::mr::pinned_resource pinned_resource{device.kind()};
  void* pinned = pinned_resource.allocate(bytes, s);
  void* dev = syncmem::mr::get_per_device_resource(device).allocate(bytes, s);
  std::memset(pinned, 3, bytes);

  std::printf("host copy ceilings, pageable -> pinned, %zu KiB:\n", kib);
  for (int t : {1, 2, 4, 8, 12, 16}) {
    std::printf("  %2d threads: memcpy %6.1f GB/s, streaming stores %6.1f GB/s\n", t,
                host_ceiling(pinned, pageable.data(), bytes, t, false),
                host_ceiling(pinned, pageable.data(), bytes, t, true));
  }
  std::printf("host copy pool, %zu KiB, median of 200 (out: from pinned memory a DMA just wrote; in: into it):\n", kib);
  for (int t : {1, 2, 4, 8, 12, 16}) {
    const double out = pool_microseconds(back.data(), pinned, dev, bytes, t, true, s);
    const double in = pool_microseconds(pageable.data(), pinned, dev, bytes, t, false, s);
    std::printf("  %2d threads: out %8.1f us (%6.1f GB/s), in %8.1f us (%6.1f GB/s)\n", t, out,
                static_cast<double>(bytes) / out / 1e3, in, static_cast<double>(bytes) / in / 1e3);
  }
  syncmem::copy(dev, pinned, bytes, s);
  auto pinned_start = clock_type::now();
  syncmem::copy(dev, pinned, bytes, s);
  std::printf(
      "pinned h2d: %.1f GB/s\n",
      static_cast<double>(bytes) / std::chrono::duration<double>(clock_type::now() - pinned_start).count() / 1e9);

  std::printf("engine, pageable, %zu KiB:\n", kib);
  for (int t : threads) {
    for (int c : chunks) {
      for (int b : buffers) {
        for (int f : first_chunks) {
          syncmem::copy_options o = syncmem::get_copy_options();
          o.host_threads = t;
          o.max_chunk = static_cast<std::size_t>(c) << 20;
          o.staging_buffers = b;
          o.min_chunk = std::min(static_cast<std::size_t>(f) << 10, o.max_chunk);
          std::printf("  threads %2d chunk %4d KiB..%2d MiB buffers %d: h2d %6.1f GB/s, d2h %6.1f GB/s\n", t, f, c, b,
                      engine_bandwidth(dev, pageable.data(), bytes, s, o),
                      engine_bandwidth(back.data(), dev, bytes, s, o));
          std::fflush(stdout);
        }
      }
    }
  }
  syncmem::mr::get_per_device_resource(device).deallocate(dev, bytes, s);
  pinned_resource.deallocate(pinned, bytes, s);
  return 0;
}
