#pragma once

// The counts behind caching_resource::statistics(): bytes and blocks handed
// out, their peaks, and how requests were served. Each thread's cache keeps
// deltas of its own (thread_cache.hpp); the true totals are these plus every
// cache's deltas, which fold() adds in. Written under the allocator's lock.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "mr/caching/thread_cache.hpp"
#include "mr/caching/thread_caches.hpp"
#include "syncmem/mr/caching_resource.hpp"

namespace syncmem::mr::detail::caching {

class caching_totals {
 public:
  struct totals {
    std::int64_t allocated, requested, live;
    std::uint64_t allocations, deallocations, thread_hits;
    std::uint64_t allocated_total, requested_total;
    std::size_t thread_cached;
  };

  // How requests were served, counted by the allocator.
  std::uint64_t central_hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t stream_waits = 0;
  std::uint64_t oom_retries = 0;
  std::uint64_t ooms = 0;

  // A block of `size` bytes handed out for a request of `bytes`, by the allocator itself.
  void hand_out(std::size_t size, std::size_t bytes) noexcept;
  // A block handed out for `requested` bytes comes back to the allocator itself.
  void take_back(std::size_t size, std::size_t requested) noexcept;
  // Adds what a thread's cache changed since the last fold. Inline for the
  // common case on the slow path: nothing changed.
  void fold(thread_cache& tc) noexcept {
    if (tc.allocated_delta.load(std::memory_order_relaxed) == 0 &&
        tc.requested_delta.load(std::memory_order_relaxed) == 0 && tc.live_delta.load(std::memory_order_relaxed) == 0) {
      return;
    }
    fold_deltas(tc);
  }
  // fold, and the counts of a cache whose thread exits.
  void absorb(thread_cache& tc) noexcept;

  // These plus every cache's deltas (takes each cache's spinlock in turn).
  [[nodiscard]] totals current(const thread_caches& caches) const;
  // What caching_statistics says of handed-out memory and hits.
  [[nodiscard]] caching_statistics report(const totals& t) const;
  // Peaks start again from what is handed out now; `own`: the calling thread's cache, or null.
  void reset_peaks(const thread_caches& caches, thread_cache* own);

 private:
  void fold_deltas(thread_cache& tc) noexcept;
  std::atomic<std::int64_t> allocated_{0};
  std::atomic<std::int64_t> requested_{0};
  std::atomic<std::int64_t> live_{0};
  std::atomic<std::int64_t> peak_allocated_{0};
  std::atomic<std::int64_t> peak_requested_{0};
  // Folded in from the caches of exited threads, and the allocator's own.
  std::uint64_t allocations_ = 0;
  std::uint64_t deallocations_ = 0;
  std::uint64_t thread_hits_ = 0;
  std::uint64_t allocated_total_ = 0;
  std::uint64_t requested_total_ = 0;
};

}  // namespace syncmem::mr::detail::caching
