// How fast one DMA of pinned memory runs while host threads copy beside it
// (not part of `syncmem bench`): the ceiling that any staged copy meets, since
// a staged copy near the link's speed must copy its bytes on the host while
// its DMAs run. Each treatment copies as many bytes as the DMA moves, once,
// starting as the DMA is enqueued: pageable to pinned memory for an upload
// (the staging a pipeline fills), pinned to pageable memory for a download
// (its copy-out), with 2..12 threads, streaming or ordinary stores, at full
// speed or paced to a rate. The DMA's own source was written with streaming
// stores just before, as the engine writes its staging. Treatments alternate
// within each round, starting one later each round; it prints the median
// (min..max) of the DMA's time and rate, its share of the DMA alone, and the
// host copy's time.
//
//   dma_beside_copy up|down [size_kib] [rounds]

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/event.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/mr/pinned_resource.hpp"
#include "syncmem/stream.hpp"
#include "transfer/host_copy_pool.hpp"

namespace {

using namespace syncmem;
using detail::host_copy_pool;
using clock_type = std::chrono::steady_clock;

constexpr std::size_t piece = std::size_t{64} << 10;

enum class stores { streaming, ordinary, ordinary_demoted };

struct treatment {
  std::string name;
  int threads = 0;  // 0: the DMA alone
  stores kind = stores::streaming;
  double paced_gbps = 0;  // 0: as fast as the threads go
};

// Threads that copy `bytes` from `src` to `dst` in pieces each time start()
// is called, claiming pieces in order; paced, piece k starts no earlier than
// k pieces at the treatment's rate after the start.
class copiers {
 public:
  explicit copiers(int count) {
    for (int i = 0; i < count; ++i) threads_.emplace_back([this, i] { run(i); });
  }
  ~copiers() {
    quit_.store(true);
    generation_.fetch_add(1);
    for (auto& t : threads_) t.join();
  }
  copiers(const copiers&) = delete;
  copiers& operator=(const copiers&) = delete;

  void start(const treatment& t, std::byte* dst, const std::byte* src, std::size_t bytes) {
    threads_now_.store(t.threads);
    kind_ = t.kind;
    paced_gbps_ = t.paced_gbps;
    dst_ = dst;
    src_ = src;
    bytes_ = bytes;
    next_.store(0);
    done_.store(0);
    left_.store(0);
    start_ = clock_type::now();
    generation_.fetch_add(1, std::memory_order_release);
  }
  // Microseconds from start() until every piece was copied; returns once no
  // thread touches the job.
  double wait() {
    while (left_.load(std::memory_order_acquire) < threads_now_.load()) {}
    return std::chrono::duration<double, std::micro>(finished_.load() - start_).count();
  }

 private:
  void run(int index) {
    std::uint64_t seen = 0;
    for (;;) {
      std::uint64_t g = generation_.load(std::memory_order_acquire);
      while (g == seen) {
        std::this_thread::yield();
        g = generation_.load(std::memory_order_acquire);
      }
      seen = g;
      if (quit_.load()) return;
      if (index >= threads_now_.load()) continue;
      const std::size_t pieces = (bytes_ + piece - 1) / piece;
      for (std::size_t k = next_.fetch_add(1); k < pieces; k = next_.fetch_add(1)) {
        if (paced_gbps_ > 0) {
          const auto due = start_ + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(
                                        static_cast<double>(k * piece) / (paced_gbps_ * 1e9)));
          while (clock_type::now() < due) {}
        }
        const std::size_t n = std::min(piece, bytes_ - k * piece);
        if (kind_ == stores::streaming) {
          host_copy_pool::copy_piece(dst_ + k * piece, src_ + k * piece, n);
        } else {
          std::memcpy(dst_ + k * piece, src_ + k * piece, n);
          if (kind_ == stores::ordinary_demoted) host_copy_pool::demote(dst_ + k * piece, n);
        }
        if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == pieces) finished_.store(clock_type::now());
      }
      left_.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  std::vector<std::thread> threads_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> quit_{false};
  std::atomic<int> threads_now_{0};  // the threads of the current job (the others skip it)
  stores kind_ = stores::streaming;
  double paced_gbps_ = 0;
  std::byte* dst_ = nullptr;
  const std::byte* src_ = nullptr;
  std::size_t bytes_ = 0;
  std::atomic<std::size_t> next_{0};
  std::atomic<std::size_t> done_{0};
  std::atomic<int> left_{0};  // threads of the current job that have stopped working on it
  clock_type::time_point start_;
  std::atomic<clock_type::time_point> finished_{};
};

struct samples {
  std::vector<double> dma;   // us
  std::vector<double> host;  // us
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const bool up = argc < 2 || std::string_view{argv[1]} != "down";
  const std::size_t bytes = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 16 * 1024) << 10;
  const int rounds = argc > 3 ? std::max(1, std::atoi(argv[3])) : 30;
  const device_id device = current_device();
  stream own{device};
  const stream_view s = own;

  std::vector<treatment> treatments{{"alone", 0}};
  for (int t : {2, 4, 8, 12}) treatments.push_back({"streaming x" + std::to_string(t), t});
  for (double rate : {45.0, 60.0, 80.0}) {
    treatments.push_back(
        {"streaming x8 paced " + std::to_string(static_cast<int>(rate)) + " GB/s", 8, stores::streaming, rate});
  }
  treatments.push_back({"ordinary x8", 8, stores::ordinary});
  treatments.push_back({"ordinary x8 paced 60 GB/s", 8, stores::ordinary, 60});
  treatments.push_back({"ordinary+demote x8 paced 60 GB/s", 8, stores::ordinary_demoted, 60});
  const int most = static_cast<int>(std::max(2U, std::thread::hardware_concurrency()) - 1);
  std::erase_if(treatments, [&](const treatment& t) { return t.threads > most; });

  mr::pinned_resource pinned{device.kind()};
  auto& device_memory = mr::get_per_device_resource(device);
  auto* dma_host = static_cast<std::byte*>(pinned.allocate(bytes, s));  // the DMA's pinned side
  auto* copy_pinned = static_cast<std::byte*>(pinned.allocate(bytes, s));
  auto* on_device = static_cast<std::byte*>(device_memory.allocate(bytes, s));
  std::vector<std::byte> pageable(bytes, std::byte{1});
  std::vector<std::byte> fill(bytes, std::byte{2});
  std::memset(copy_pinned, 3, bytes);
  event before{device, event_options{.timing = true}};
  event after{device, event_options{.timing = true}};
  int threads = 0;
  for (const auto& t : treatments) threads = std::max(threads, t.threads);
  copiers pool{threads};

  std::printf("%s: %s DMA of %zu KiB beside a host copy of as many bytes (%s), %d rounds\n", to_string(device).c_str(),
              up ? "upload" : "download", bytes >> 10, up ? "pageable to pinned" : "pinned to pageable", rounds);
  std::vector<samples> results(treatments.size());
  for (int round = -2; round < rounds; ++round) {  // two rounds to warm up
    for (std::size_t j = 0; j < treatments.size(); ++j) {
      const std::size_t i = (j + static_cast<std::size_t>(round + 2)) % treatments.size();
      const treatment& t = treatments[i];
      // The DMA's pinned side as the engine leaves its staging: written with
      // streaming stores (an upload's source), or just read (a download's).
      if (up) host_copy_pool::copy_piece(dma_host, fill.data(), bytes);
      s.synchronize();
      before.record(s);
      {
        device_guard guard{device};
        if (up) {
          detail::backend_for(device).memcpy_async(on_device, dma_host, bytes, device.index(), s.handle());
        } else {
          detail::backend_for(device).memcpy_async(dma_host, on_device, bytes, device.index(), s.handle());
        }
      }
      after.record(s);
      double host = 0;
      if (t.threads > 0) {
        if (up) {
          pool.start(t, copy_pinned, pageable.data(), bytes);
        } else {
          pool.start(t, pageable.data(), copy_pinned, bytes);
        }
        host = pool.wait();
      }
      s.synchronize();
      if (round < 0) continue;
      results[i].dma.push_back(1e3 * static_cast<double>(event::elapsed_ms(before, after)));
      results[i].host.push_back(host);
    }
  }

  const double alone = median(results[0].dma);
  const auto rate = [&](double us) { return static_cast<double>(bytes) / us / 1e3; };
  for (std::size_t i = 0; i < treatments.size(); ++i) {
    const auto& r = results[i];
    const auto [lo, hi] = std::minmax_element(r.dma.begin(), r.dma.end());
    const double dma = median(r.dma);
    std::printf("  %-34s DMA %8.1f us (%8.1f..%8.1f), %5.1f GB/s, %.3f of alone", treatments[i].name.c_str(), dma, *lo,
                *hi, rate(dma), alone / dma);
    if (treatments[i].threads > 0) {
      const double host = median(r.host);
      std::printf("; host copy %8.1f us, %6.1f GB/s", host, rate(host));
    }
    std::printf("\n");
  }
  device_memory.deallocate(on_device, bytes, s);
  pinned.deallocate(copy_pinned, bytes, s);
  pinned.deallocate(dma_host, bytes, s);
  return 0;
}
