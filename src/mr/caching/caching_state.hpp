#pragma once

// The state behind a caching_resource (see include/syncmem/mr/caching_resource.hpp
// for what it does, docs/allocator.md for how). Shared between the resource
// and the per-thread caches, which may outlive it until their threads exit.
// It ties the parts together: the fast path through this thread's cache, and
// under its lock the slow path through the stream pools, the segments, the
// growable range and the pending frees.
//
// Locks, in the only order they may nest: a graph pool's (its memory counts
// here: pool_accounts), mutex_, then the thread caches' list, then a
// thread_cache's spinlock. The state of a pool whose memory counts in this one
// (pool_options::counts_in) takes this mutex_ under its own, never the other
// way. The fast path takes only its own thread's spinlock, and never holds it
// while taking another lock.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "mr/caching/block.hpp"
#include "mr/caching/caching_events.hpp"
#include "mr/caching/caching_totals.hpp"
#include "mr/caching/device_segments.hpp"
#include "mr/caching/growable_range.hpp"
#include "mr/caching/pending_frees.hpp"
#include "mr/caching/pointer_map.hpp"
#include "mr/caching/pool_accounts.hpp"
#include "mr/caching/reservation.hpp"
#include "mr/caching/state_mutex.hpp"
#include "mr/caching/stream_pools.hpp"
#include "mr/caching/thread_cache.hpp"
#include "mr/caching/thread_caches.hpp"
#include "syncmem/mr/allocator_snapshot.hpp"
#include "syncmem/mr/caching_options.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::mr::detail {

class caching_state : public std::enable_shared_from_this<caching_state>, public caching::pool_accounts {
 public:
  caching_state(device_id device, caching_options options, memory_resource* upstream, std::string name);
  ~caching_state() override;
  caching_state(const caching_state&) = delete;
  caching_state& operator=(const caching_state&) = delete;

  // After construction (needs the shared_ptr) and before destruction.
  void start();
  void shutdown() noexcept;

  [[nodiscard]] void* allocate(std::size_t bytes, stream_view s);
  void deallocate(void* p, std::size_t bytes, stream_view s) noexcept;
  void record_stream(void* p, stream_view s);
  [[nodiscard]] std::optional<live_allocation> allocation_info(const void* p) const;
  void release_stream(stream_handle handle) noexcept;
  std::size_t trim(std::size_t max_cached_bytes);
  void set_limit(std::optional<std::size_t> limit_bytes) noexcept { reserved_.set_limit(limit_bytes); }
  [[nodiscard]] std::optional<std::size_t> limit() const noexcept { return reserved_.limit(); }
  [[nodiscard]] caching_statistics statistics();

  // The graph pools' memory, and that of the pools that count in this one,
  // counted with the cache's (caching::pool_accounts).
  [[nodiscard]] bool reserve(std::size_t bytes, bool segment) noexcept override;
  [[nodiscard]] bool admits(std::size_t bytes) noexcept override;
  void add_reserved(std::size_t bytes) noexcept override;
  void remove_reserved(std::size_t bytes) noexcept override;
  void unreserve(std::size_t bytes, bool segment) noexcept override;
  void handed_out(std::size_t size, std::size_t requested) noexcept override;
  void taken_back(std::size_t size, std::size_t requested) noexcept override;
  // This state's memory counts in `other` too (pool_options::counts_in):
  // before its first allocation, with no per-thread caches.
  void count_in(std::shared_ptr<caching::pool_accounts> other);
  void settle_counts() noexcept;
  void reset_peaks();
  [[nodiscard]] allocator_snapshot snapshot();
  void add_segment_observer(std::shared_ptr<segment_observer> observer);
  bool remove_segment_observer(const segment_observer* observer) noexcept;
  void detach_segment_observers() noexcept;

  [[nodiscard]] const caching_options& options() const noexcept { return options_; }
  [[nodiscard]] memory_resource* upstream() const noexcept { return upstream_; }
  [[nodiscard]] bool growable() const noexcept { return range_.in_use(); }

  // A thread with a cache of this resource exits: takes its blocks and counts.
  void retire_cache(caching::thread_cache& cache, caching::drained_blocks& blocks) noexcept;

 private:
  using block = caching::block;
  using pool_kind = caching::pool_kind;
  using stream_pool = caching::stream_pool;
  using thread_cache = caching::thread_cache;

  struct handed {
    void* p;
    block* b;
    std::uint32_t generation;
  };

  // ---- under mutex_ ----
  [[nodiscard]] live_allocation describe_live(const block* b) const noexcept;
  handed allocate_slow(std::size_t bytes, std::size_t key, stream_view s, thread_cache* tc, std::uint32_t label);
  block* find_or_grow(pool_kind kind, std::size_t key, std::size_t bytes, stream_pool& pool, stream_view s);
  void hand_out(block* b, std::size_t bytes, std::size_t key, stream_handle s);
  void free_live(void* p, stream_handle s);
  // A cached block for the request: the stream's own pool, then find_elsewhere.
  block* find_cached(pool_kind kind, std::size_t key, stream_pool& pool, stream_view s);
  // The idle pool, then other streams' free memory (steal).
  block* find_elsewhere(pool_kind kind, std::size_t key, stream_pool& pool, stream_view s);
  block* steal(pool_kind kind, std::size_t key, stream_pool& pool, stream_view s);
  block* grow(pool_kind kind, std::size_t key, stream_pool& pool, stream_view s);
  block* recover(pool_kind kind, std::size_t key, std::size_t bytes, stream_pool& pool, stream_view s);
  [[noreturn]] void throw_out_of_memory(std::size_t bytes, std::size_t key);
  [[nodiscard]] std::string out_of_memory_hint(std::size_t key, std::size_t cached, std::size_t largest) const;
  std::size_t flush_caches(bool wait);
  void return_cached(const caching::drained_blocks& blocks);
  void process_pending();
  void wait_pending();
  bool merge_into_idle(stream_pool& retired) noexcept;
  void retire_pool(stream_handle handle);
  std::size_t release_free(std::size_t max_cached_bytes);
  std::size_t release_idle_segments();
  bool compact(bool out_of_memory);
  bool near_capacity(std::size_t size);
  [[nodiscard]] bool grows_from_idle() const noexcept { return options_.grow_from_idle || out_of_memory_; }

  // ---- configuration ----
  const device_id device_;
  const caching_options options_;
  memory_resource* const upstream_;
  const std::string name_;
  const std::uint64_t id_;
  std::uint64_t observer_ = 0;

  // ---- the parts; all but the thread caches under mutex_ ----
  mutable caching::state_mutex mutex_;
  caching::reservation reserved_;                      // the graph pools' segments and pages too
  std::size_t graph_segments_ = 0;                     // of those, the graph pools' segments
  std::shared_ptr<caching::pool_accounts> counts_in_;  // where this memory counts too, or null
  caching::stream_pools pools_;
  caching::caching_events events_;
  caching::pending_frees pending_;
  caching::device_segments segments_;
  caching::growable_range range_;
  caching::caching_totals totals_;
  caching::pointer_map live_;  // handed out, to callers or to per-thread caches
  caching::thread_caches caches_;
  std::size_t device_memory_ = 0;  // the device's total memory, once asked
  bool compacting_ = false;        // large blocks grow in the range (compact())
  bool out_of_memory_ = false;     // and take idle pages first: memory ran out once
};

}  // namespace syncmem::mr::detail
