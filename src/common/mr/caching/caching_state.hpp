#pragma once

// The state behind a caching_resource (see include/syncmem/mr/caching_resource.hpp
// for what it does, docs/allocator.md for how). Shared between the resource
// and the per-thread caches, which may outlive it until their threads exit.
//
// Locks, in the only order they may nest: the resource's mutex_, then
// registry_mutex_, then a thread_cache's spinlock. The fast path takes only
// its own thread's spinlock, and never holds it while taking another lock.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../../backend.hpp"
#include "block.hpp"
#include "free_index.hpp"
#include "pointer_map.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/allocator_snapshot.hpp"
#include "syncmem/mr/caching_options.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/stream.hpp"
#include "thread_cache.hpp"

namespace syncmem::mr::detail {

namespace caching {

// The free memory that belongs to one stream: freed on it, or cut from
// memory reserved for it. Retired pools belong to destroyed streams and wait
// for an event recorded before the destruction; the idle pool holds memory
// that no stream's work can still be using.
struct stream_pool {
  enum class role : std::uint8_t { live, retired, idle };
  CUstream_st* stream = nullptr;
  role kind = role::live;
  CUevent_st* retire_event = nullptr;
  free_index small;
  free_index large;

  free_index& index(pool_kind k) noexcept { return k == pool_kind::small ? small : large; }
  [[nodiscard]] const free_index& index(pool_kind k) const noexcept { return k == pool_kind::small ? small : large; }
};

// Unmapped blocks of the growable range, smallest first.
struct by_size_then_address {
  bool operator()(const block* a, const block* b) const noexcept {
    return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
  }
};

}  // namespace caching

class caching_state : public std::enable_shared_from_this<caching_state> {
 public:
  caching_state(device_id device, caching_options options, memory_resource* upstream, std::string name);
  ~caching_state();
  caching_state(const caching_state&) = delete;
  caching_state& operator=(const caching_state&) = delete;

  // After construction (needs the shared_ptr) and before destruction.
  void start();
  void shutdown() noexcept;

  [[nodiscard]] void* allocate(std::size_t bytes, stream_view s);
  void deallocate(void* p, std::size_t bytes, stream_view s) noexcept;
  void record_stream(void* p, stream_view s);
  void release_stream(CUstream_st* handle) noexcept;
  std::size_t trim(std::size_t max_cached_bytes);
  void set_limit(std::optional<std::size_t> limit_bytes) noexcept;
  [[nodiscard]] caching_statistics statistics();
  void reset_peaks();
  [[nodiscard]] allocator_snapshot snapshot();

  [[nodiscard]] const caching_options& options() const noexcept { return options_; }
  [[nodiscard]] memory_resource* upstream() const noexcept { return upstream_; }
  [[nodiscard]] bool growable() const noexcept { return growable_in_use_.load(std::memory_order_relaxed); }

  // A thread with a cache of this resource exits: takes its blocks and counts.
  void retire_cache(caching::thread_cache& cache,
                    std::vector<std::pair<CUstream_st*, caching::block*>>& blocks) noexcept;

 private:
  using block = caching::block;
  using pool_kind = caching::pool_kind;
  using stream_pool = caching::stream_pool;
  using thread_cache = caching::thread_cache;
  using drained_blocks = std::vector<std::pair<CUstream_st*, block*>>;

  struct handed {
    void* p;
    block* b;
    std::uint32_t generation;
  };

  // ---- the fast path (no shared lock) ----
  thread_cache* cache_of_this_thread();
  thread_cache* find_or_make_cache();
  bool free_into_cache(thread_cache& tc, void* p, std::size_t bytes, CUstream_st* s) noexcept;
  void fold(thread_cache& tc) noexcept;  // under mutex_

  // ---- under mutex_ ----
  handed allocate_slow(std::size_t bytes, std::size_t key, stream_view s, thread_cache* tc);
  void deallocate_slow(void* p, stream_view s, thread_cache* tc) noexcept;
  stream_pool& pool_for(CUstream_st* s);
  block* find_cached(pool_kind kind, std::size_t key, stream_pool& pool, stream_view s);
  block* take_free(stream_pool& pool, pool_kind kind, std::size_t key);
  block* steal(pool_kind kind, std::size_t key, stream_pool& pool, stream_view s);
  void split(block* b, std::size_t key, stream_pool& pool, pool_kind kind);
  block* free_block(block* b, stream_pool& pool) noexcept;
  void hand_out(block* b, std::size_t bytes, std::size_t key, CUstream_st* s);
  block* grow(pool_kind kind, std::size_t key, stream_pool& pool, stream_view s);
  block* recover(pool_kind kind, std::size_t key, std::size_t bytes, stream_pool& pool, stream_view s);
  [[noreturn]] void throw_out_of_memory(std::size_t bytes, std::size_t key);
  std::size_t flush_caches(bool wait);
  void return_cached(block* b, CUstream_st* s);
  void process_pending();
  void wait_pending();
  bool merge_into_idle(stream_pool& retired) noexcept;
  std::size_t release_free(std::size_t max_cached_bytes);
  std::size_t release_idle_segments();
  [[nodiscard]] std::vector<caching::segment*> idle_segments() const;
  std::size_t drop_segment(caching::segment& seg);
  std::size_t release_segment(caching::segment& seg) noexcept;
  void order_after(CUstream_st* other, stream_view s);
  [[nodiscard]] bool exceeds_limit(std::size_t more) const noexcept;
  [[nodiscard]] std::size_t free_bytes() const noexcept;
  [[nodiscard]] std::size_t largest_free() const noexcept;
  struct totals {
    std::int64_t allocated, requested, live;
    std::uint64_t allocations, deallocations, thread_hits;
    std::size_t thread_cached;
  };
  [[nodiscard]] totals current_totals() const;

  // ---- events ----
  CUevent_st* get_event();
  void put_event(CUevent_st* e) noexcept;
  void record(CUevent_st* e, CUstream_st* s);
  [[nodiscard]] bool passed(CUevent_st* e);

  // ---- growable range ----
  [[nodiscard]] bool growable_ready();
  block* grow_growable(std::size_t key, stream_pool& pool);
  [[nodiscard]] std::size_t idle_pages(const block* keep_whole) const noexcept;
  std::size_t reclaim_pages(std::size_t wanted, bool keep_handles, const block* keep_whole = nullptr);
  std::size_t unmap_pages(block* b, std::size_t wanted, bool keep_handles);
  void add_unmapped(block* m);
  void release_spares() noexcept;

  // ---- configuration ----
  const device_id device_;
  const caching_options options_;
  memory_resource* const upstream_;
  const std::string name_;
  const std::uint64_t id_;
  syncmem::detail::backend& backend_;
  const int index_;
  std::atomic<std::size_t> limit_;
  std::uint64_t observer_ = 0;

  // ---- shared state, under mutex_ ----
  mutable std::mutex mutex_;
  caching::block_store blocks_;
  std::map<std::uintptr_t, std::unique_ptr<caching::segment>> segments_;
  caching::pointer_map live_;  // handed out, to callers or to per-thread caches
  std::unordered_map<CUstream_st*, std::unique_ptr<stream_pool>> pools_;
  stream_pool* last_pool_ = nullptr;
  stream_pool idle_;
  std::vector<std::unique_ptr<stream_pool>> retired_;
  block* pending_ = nullptr;  // list through link_prev/link_next
  std::unordered_set<block*> with_uses_;
  std::vector<CUevent_st*> spare_events_;
  std::vector<CUevent_st*> all_events_;
  std::size_t reserved_ = 0;
  std::size_t peak_reserved_ = 0;
  std::size_t pending_bytes_ = 0;
  bool limit_hit_ = false;
  std::uint64_t central_hits_ = 0, misses_ = 0, splits_ = 0, merges_ = 0, segment_allocations_ = 0,
                segment_releases_ = 0, stream_waits_ = 0, oom_retries_ = 0, ooms_ = 0;
  // Folded in from per-thread caches of exited threads, and the slow path's own.
  std::uint64_t allocations_ = 0, deallocations_ = 0, thread_hits_ = 0;

  // Totals of handed-out blocks: the true figure is these plus every cache's
  // deltas (see thread_cache). Written under mutex_ only (plain loads and
  // stores: no locked instructions), atomic for the sake of the type system.
  std::atomic<std::int64_t> allocated_{0};
  std::atomic<std::int64_t> requested_{0};
  std::atomic<std::int64_t> live_count_{0};
  std::atomic<std::int64_t> peak_allocated_{0};
  std::atomic<std::int64_t> peak_requested_{0};

  // The growable range (one reserved address range, pages mapped on demand).
  bool growable_tried_ = false;
  std::atomic<bool> growable_in_use_{false};
  std::unique_ptr<caching::segment> range_;
  std::size_t page_size_ = 0;
  std::vector<syncmem::detail::physical_handle> pages_;  // per page of the range; 0 = unmapped
  std::vector<syncmem::detail::physical_handle> spare_pages_;
  std::size_t mapped_pages_ = 0;
  std::set<block*, caching::by_size_then_address> unmapped_;

  // ---- per-thread caches ----
  mutable std::mutex registry_mutex_;
  std::vector<std::shared_ptr<thread_cache>> caches_;
};

}  // namespace syncmem::mr::detail
