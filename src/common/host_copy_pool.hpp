#pragma once

// Host-side memcpy spread over a pool of threads, for the transfer engine's
// staging copies and host-to-host copies. One thread cannot keep up with a
// PCIe Gen5 link (a memcpy from pageable memory runs at 10-20 GB/s per
// core), and the first touch of fresh pageable memory is page faults, which
// several threads take in parallel.
//
// The caller copies one piece itself and, while it waits, runs queued pieces
// of any copy: a copy never waits for a pool thread that is not coming.
// Workers spin briefly before they sleep, so that the pieces of a pipeline's
// next chunk start at once.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>

namespace syncmem::detail {

// How the destination is written. Streaming (non-temporal) stores skip reading
// the destination into the cache first, and leave no dirty lines behind that
// a DMA reading the destination next would have to fetch from the cores'
// caches: measured on the H100 machine, a 4 MiB staging buffer filled by 16
// threads went up in 88 us after streaming stores, 198 us after ordinary ones.
enum class host_store { cached, streaming };

class host_copy_pool {
 public:
  // The process-wide pool. Never destroyed; its threads sleep until exit.
  [[nodiscard]] static host_copy_pool& instance();

  // Copies `bytes` bytes from `src` to `dst` (not overlapping) with up to
  // `threads` threads, the caller included. Small copies stay on the caller.
  void copy(void* dst, const void* src, std::size_t bytes, int threads, host_store store = host_store::streaming);

  // Threads used when none are asked for: half the cores, at most 8.
  [[nodiscard]] static int default_threads() noexcept;
  // Copies one piece (with streaming stores when asked and the piece is large).
  static void copy_piece(void* dst, const void* src, std::size_t bytes, host_store store) noexcept;

  // Pieces smaller than this are not worth a thread.
  static constexpr std::size_t min_piece = std::size_t{64} << 10;

 private:
  struct completion {
    std::atomic<std::size_t> remaining;
  };
  struct task {
    std::byte* dst;
    const std::byte* src;
    std::size_t bytes;
    host_store store;
    std::shared_ptr<completion> done;
  };

  host_copy_pool() = default;
  void ensure_workers(int count);
  bool run_one();
  void work();
  static void run(task& t) noexcept;

  std::mutex mutex_;
  std::condition_variable available_;
  std::deque<task> queue_;
  std::atomic<std::size_t> queued_{0};
  int workers_ = 0;
  int sleeping_ = 0;
};

}  // namespace syncmem::detail
