#pragma once

// One resource's memory in one graph_pool: its private pool (see
// mr/caching/private_pools.hpp for when allocations come here and when a
// freed block may be reused). Small requests (up to 1 MiB) share segments of
// 2 MiB; larger ones come from one growable segment per pool, pages mapped at
// its end as it grows (as PyTorch's expandable segments serve its private
// pools), or, without virtual memory management or with an upstream
// resource, from segments of their own rounded to 2 MiB. Blocks are split
// from free ones and merged with free neighbours, so that a graph recorded
// for a larger batch reuses what a smaller one freed.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "mr/caching/graph_pool_observers.hpp"
#include "mr/caching/pool_accounts.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::detail {
struct graph_pool_state;
struct graph_pool_usage;
}  // namespace syncmem::detail

namespace syncmem::mr::detail::caching {

class private_pool {
 public:
  // Its memory counts toward `accounts` (the caching resource's statistics
  // and limit) while they live; `observers` are told of its segments.
  private_pool(device_id device, memory_resource* upstream, const syncmem::detail::graph_pool_state& owner,
               std::string name, std::weak_ptr<pool_accounts> accounts,
               std::shared_ptr<const graph_pool_observers> observers);
  // Gives every segment back, after the device's work is done (no launch of
  // a graph may still be using them). Every block is free by then.
  ~private_pool();
  private_pool(const private_pool&) = delete;
  private_pool& operator=(const private_pool&) = delete;

  // A block of at least `bytes` for capture number `capture` on stream `s`.
  // @throws syncmem::out_of_memory naming the capture when the device has no room
  [[nodiscard]] void* allocate(std::size_t bytes, stream_handle s, std::uint64_t capture);
  // `p`, a block of this pool, is free: freed on `s`, during capture number
  // `capture` (0: outside any capture). While the capture that allocated it
  // is open, it is reused only when that capture freed it, and only on `s`.
  void deallocate(void* p, stream_handle s, std::uint64_t capture) noexcept;
  // Another stream than the one `p` was handed out on uses it (record_stream).
  void used_on(void* p, stream_handle s);
  // `p` as caching_resource::allocation_info answers; nullopt unless it is a live block here.
  [[nodiscard]] std::optional<live_allocation> info(const void* p);
  // The graph_pool's number.
  [[nodiscard]] std::uint64_t pool_id() const noexcept { return pool_id_; }
  // Holds the pool still (no segment comes or goes) while a new observer is
  // told of what it holds (report_to, called under it) and joins the others.
  [[nodiscard]] std::unique_lock<std::mutex> hold() { return std::unique_lock{mutex_}; }
  void report_to(segment_observer& observer) const noexcept;
  // Every segment, and the blocks handed out (caching_resource::checkpoint).
  [[nodiscard]] graph_pool_checkpoint checkpoint();
  // Frees every live block, then hands out again those `c` found live
  // (caching_resource::restore), where they were; checks first that each lies in a
  // segment here, apart from the others.
  graph_pool_restored restore(const graph_pool_checkpoint& c);

 private:
  // What a block freed in an open capture on `freeing` must wait for: the
  // capture's frontier of `freeing` and of every stream in `users`; nullopt
  // when one of them is outside the capture or the backend cannot tell.
  std::optional<std::vector<syncmem::detail::capture_node>> reached_by(stream_handle freeing,
                                                                       const std::vector<stream_handle>& users);
  // Whether work enqueued next on `s` runs after every one of `nodes`.
  bool follows(stream_handle s, const std::vector<syncmem::detail::capture_node>& nodes);

  struct block {
    void* segment = nullptr;  // the start of the segment it is part of
    std::size_t size = 0;
    bool small = false;         // part of a small segment
    std::size_t requested = 0;  // while handed out
    stream_handle stream{};     // the stream it was handed out on
    bool free = true;
    std::uint64_t allocated_in = 0;  // the capture it was last handed to
    std::uint64_t freed_in = 0;      // allocated_in when it was freed (0: reusable by any capture)
    stream_handle freed_on{};        // the stream that freed it in that capture, or null
    // The nodes of that capture that every stream using it had reached when
    // it was freed: reusable on a stream that follows them all. nullopt: not
    // in that capture.
    std::optional<std::vector<syncmem::detail::capture_node>> freed_after;
    std::vector<stream_handle> used_by;  // other streams record_stream named while it was handed out
  };
  using block_map = std::map<void*, block>;
  // A growable segment: reserved address space, pages mapped from its start.
  struct heap {
    void* base = nullptr;
    std::size_t reserved = 0;
    std::vector<syncmem::detail::physical_handle> pages;
  };

  // Whether the segment at `base` is a growable one.
  [[nodiscard]] bool is_heap(const void* base) const noexcept;
  // Whether `b`, free, may be handed out in capture `capture` on `s`.
  bool reusable(const block& b, stream_handle s, std::uint64_t capture);
  // The smallest free block of at least `size` that may be handed out so; blocks_.end() if none.
  block_map::iterator find_fit(std::size_t size, bool small, stream_handle s, std::uint64_t capture);
  // Merges every pair of free neighbours that may merge; whether any did.
  bool coalesce();
  // Whether free `b` may be handed out in capture `capture` on `s`, and merged
  // with neighbours for it: it is free for every capture, or for this one.
  bool joins(const block& b, bool small, stream_handle s, std::uint64_t capture);
  // Neighbours each reusable by this request but kept apart (freed in the open
  // capture on other terms, such as one on `s` and one after the nodes `s`
  // follows): the first run of them that holds `size`, merged under the
  // narrower condition (this capture, on `s`); blocks_.end() if none. PyTorch
  // merges them always.
  block_map::iterator merge_for(std::size_t size, bool small, stream_handle s, std::uint64_t capture);
  // Merges the free blocks first..last into one, reusable in `capture` on `s` only until it ends.
  block_map::iterator merge_run(block_map::iterator first, block_map::iterator last, stream_handle s,
                                std::uint64_t capture);
  // A free block of at least `size` bytes on new memory: the end of the
  // growable segment of `s` extended, or a segment of its own; blocks_.end()
  // when the device has no room.
  block_map::iterator grow(std::size_t size, bool small, stream_handle s, std::uint64_t capture);
  block_map::iterator new_segment(std::size_t size, bool small);
  // The growable segment of `s`, reserved on first use; nullptr without
  // virtual memory management (or address space).
  heap* heap_for(stream_handle s);
  // Maps pages at the end of `h` for `bytes` more; false when the device has no room.
  bool grow_heap(heap& h, std::size_t bytes);
  // Hands out `it` for `bytes` (`size` rounded), splitting off the rest.
  void* hand_out(block_map::iterator it, std::size_t size, std::size_t bytes, stream_handle s, std::uint64_t capture);
  // Splits the block at `it` at `at` (inside it); returns the part from `at`.
  block_map::iterator split_at(block_map::iterator it, void* at);
  // Merges the free block at `it` with its free neighbours where their
  // conditions of reuse allow; merge_next with the next one only.
  void merge(block_map::iterator it);
  bool merge_next(block_map::iterator it);
  // Gives `into` the conditions of reuse of both `into` and `other`, adjacent
  // free blocks; false when no single condition covers both.
  static bool combine(block& into, const block& other);
  // Makes the checkpoint's block `x`, free now, one block handed out as it was (restore).
  void carve(const graph_pool_block& x);

  device_id device_;
  memory_resource* upstream_;
  std::uint64_t pool_id_;                                     // the graph_pool's, for messages
  std::shared_ptr<syncmem::detail::graph_pool_usage> usage_;  // the graph_pool's counts
  std::string name_;
  std::weak_ptr<pool_accounts> accounts_;  // the caching resource's
  std::shared_ptr<const graph_pool_observers> observers_;
  std::mutex mutex_;
  std::map<void*, std::size_t> segments_;  // every segment, by address, with its bytes (mapped, if growable)
  block_map blocks_;                       // every block, by address: they tile the segments
  // One per stream that allocated large blocks, as PyTorch keeps an
  // expandable segment per stream.
  std::map<stream_handle, heap> heaps_;
  std::size_t page_ = 0;  // their page size; 0 without virtual memory management
  bool vmm_tried_ = false;
};

}  // namespace syncmem::mr::detail::caching
