#pragma once

// The growable range of a caching allocator (expandable segments): one
// reserved virtual address range, twice the device's memory, with physical
// pages mapped where blocks need them (large pages in large growths) and
// unmapped when memory is given back.
// Its blocks belong to the large pools like those of ordinary segments; the
// unmapped stretches between them are blocks too, kept by size. Not
// thread-safe: the allocator calls it under its lock.
//
// A growth that takes idle pages does not wait for the device: it maps their
// memory at its new place as well, makes the growing stream wait for the
// work of the streams that freed them, and unmaps their old place once that
// work has passed (see docs/allocator.md).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "mr/caching/block.hpp"
#include "mr/caching/caching_events.hpp"
#include "mr/caching/reservation.hpp"
#include "mr/caching/segment_observers.hpp"
#include "mr/caching/stream_pools.hpp"
#include "syncmem/device.hpp"

namespace syncmem::mr::detail::caching {

// Large pages go only into growths of at least this much: a block that large
// tends to be freed and reused whole, while the memory of smaller growths is
// what grow_from_idle moves page by page. Replays on an emulated device with
// 20 MiB large pages, peak reserved / peak requested: GPT-2 1.006 (pages
// only: 1.003), the other traces as with pages only; with large pages in
// every growth, ResNet-50 1.022 and inference 1.041 (pages only: 1.011, 1.012).
constexpr std::size_t large_page_growth = std::size_t{256} << 20;

class growable_range {
 public:
  struct settings {
    bool enabled = false;              // caching_options::expandable
    bool release_before_grow = false;  // caching_options::release_before_grow
    bool grow_from_idle = false;       // caching_options::grow_from_idle
    std::size_t page_size = 0;         // caching_options::expandable_page_size
    std::size_t large_page_size = 0;   // caching_options::expandable_large_page_size
  };

  growable_range(device_id device, settings config, std::string name, stream_pools& pools, reservation& reserved,
                 caching_events& events, const segment_observers& observers);
  growable_range(const growable_range&) = delete;
  growable_range& operator=(const growable_range&) = delete;

  // Whether the range is there to grow into; reserves it on the first call
  // (false, for good, when the device has no virtual memory management).
  [[nodiscard]] bool ready();
  [[nodiscard]] bool in_use() const noexcept { return in_use_.load(std::memory_order_relaxed); }
  // Turns the range on when ordinary segments near their capacity, and its
  // growths take idle pages first (with release_before_grow) once memory ran
  // out (caching_options::compact_under_pressure); ready() then says whether
  // the device has a range to give.
  void enable_under_pressure(bool out_of_memory) noexcept {
    config_.enabled = true;
    config_.grow_from_idle = config_.grow_from_idle || out_of_memory;
  }
  // The size of its pages, once ready().
  [[nodiscard]] std::size_t page_size() const noexcept { return page_size_; }
  // The size of its large pages, once ready(); 0 when it maps none.
  [[nodiscard]] std::size_t large_page_size() const noexcept { return large_pages_ * page_size_; }

  // A free block of at least `key` bytes for `pool`, split to `key`, mapping
  // pages as needed; nullptr when the limit or the device refuses.
  [[nodiscard]] block* grow(std::size_t key, stream_pool& pool);
  // Unmaps whole pages of free blocks, from the top of the range down, until
  // `wanted` bytes are unmapped; keeps their handles for reuse when asked.
  // Unmaps the old places of moved pages first, whatever is wanted. Returns
  // the bytes unmapped (and released, as moved handles let go).
  std::size_t reclaim(std::size_t wanted, bool keep_handles);

  // nullptr until reserved.
  [[nodiscard]] const segment* range() const noexcept { return range_.get(); }
  [[nodiscard]] bool has_mapped_pages() const noexcept { return mapped_pages_ > 0; }
  // Tells one observer of every stretch of mapped pages (as mapped), or all of
  // them (as about to be unmapped), for observers that come or a resource that goes.
  void report_mapped(segment_observer& observer) const noexcept;
  void report_unmapping() const noexcept;
  // Unmaps and releases everything; for the allocator's destructor, with the device idle.
  void release_all() noexcept;
  // Growths whose moved pages are still mapped at their old place too (a
  // later growth unmaps them there once their earlier work has passed).
  [[nodiscard]] std::size_t moves_in_flight() const noexcept { return moving_.size(); }

 private:
  using handle = syncmem::detail::physical_handle;
  struct placement {
    block* fits = nullptr;      // a free block of the pool that fits already
    block* hole = nullptr;      // else the unmapped block to map pages at the start of
    block* extended = nullptr;  // the pool's free block just before the hole, if any
    block* joined = nullptr;    // the pool's free block just after it, when the hole is mapped whole to reach it
    std::size_t need = 0;       // bytes to map there
  };
  // Which free blocks idle pages are taken from first.
  enum class victims : bool { top_down, smallest_first };
  struct by_size_then_address {
    bool operator()(const block* a, const block* b) const noexcept {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };

  bool reserve_range();
  [[nodiscard]] placement choose(std::size_t key, const stream_pool& pool, bool join_after) const;
  bool make_room(placement& where, std::size_t key, const stream_pool& pool);
  bool join_if_cheaper(placement& where, std::size_t key, const stream_pool& pool, std::size_t spare) const;
  block* map_hole(const placement& where, stream_pool& pool);
  // One physical allocation to map: a page, or a large page of large_pages_ pages.
  struct unit {
    std::uintptr_t at = 0;
    bool large = false;
    handle h = 0;  // 0 until made
  };
  bool map_stretch(std::uintptr_t at, std::size_t count);
  std::vector<unit> plan_units(std::uintptr_t at, std::size_t count);
  void map_units(const std::vector<unit>& units);
  void give_back_handles(const std::vector<unit>& units) noexcept;
  void place(block* m, block* hole, std::size_t need);
  [[nodiscard]] std::uintptr_t page_boundary_below(std::uintptr_t address) const noexcept;
  [[nodiscard]] std::uintptr_t page_boundary_above(std::uintptr_t address) const noexcept;
  [[nodiscard]] std::size_t slot_of(std::uintptr_t address) const noexcept;
  [[nodiscard]] std::uintptr_t large_start(std::size_t slot) const noexcept;
  // The part of a free block whose pages can be unmapped: whole pages, and
  // whole large pages only.
  struct stretch {
    std::uintptr_t start = 0, end = 0;
    [[nodiscard]] std::size_t bytes() const noexcept { return end > start ? end - start : 0; }
  };
  [[nodiscard]] stretch movable(const block* b) const noexcept { return movable(b->ptr, b->end()); }
  [[nodiscard]] stretch movable(std::uintptr_t from, std::uintptr_t to) const noexcept;
  // `across`: free blocks side by side count as one, whatever their pools.
  [[nodiscard]] std::size_t idle_pages(const placement* keep, bool across) const noexcept;
  [[nodiscard]] std::vector<block*> candidates(const placement* keep, victims order) const;
  std::size_t unmap_idle(std::size_t wanted, bool keep_handles, const placement* keep, victims order);
  std::size_t move_idle(std::size_t wanted, const placement& keep, victims order, const stream_pool& pool);
  void merge_free_neighbours(const placement* keep) noexcept;
  // The first address of the pages at the end of `s` that make `wanted`
  // bytes (large pages whole; with `pages_only`, up to the first large page),
  // and how many units they are.
  struct cut {
    std::uintptr_t start = 0;
    std::size_t units = 0;
  };
  [[nodiscard]] cut cut_from_end(const stretch& s, std::size_t wanted, bool pages_only) const noexcept;
  std::size_t unmap_pages(block* b, std::size_t wanted, bool keep_handles);
  std::size_t move_pages(block* b, std::size_t wanted, bool pages_only, std::vector<block*>& stretches);
  std::size_t settle(bool device_idle);
  void unmap_moved(block* b);
  [[nodiscard]] bool still_mapped_elsewhere(handle h) const noexcept;
  block* cut_out(block* b, std::uintptr_t start, std::uintptr_t aligned_end, std::size_t spares);
  void unmap_unit(std::uintptr_t address, bool keep_handle) noexcept;
  void add_unmapped(block* m);
  void release_spares() noexcept;
  template <class F>
  void for_each_mapped(F&& f) const;

  const device_id device_;
  syncmem::detail::backend& backend_;
  syncmem::detail::vmm_capability* vmm_;  // null where the backend has no virtual memory API
  const int index_;
  settings config_;  // enabled by enable_under_pressure
  const std::string name_;
  stream_pools& pools_;
  reservation& reserved_;
  bool tried_ = false;
  std::atomic<bool> in_use_{false};
  std::unique_ptr<segment> range_;
  std::size_t page_size_ = 0;
  std::size_t large_pages_ = 0;  // pages per large page; 0: none are made
  std::vector<handle> pages_;    // per page of the range; 0 = unmapped (a large page's in each of its pages)
  std::vector<bool> large_;      // per page of the range: part of a large page
  std::vector<handle> spare_pages_;
  std::vector<handle> spare_large_;
  std::size_t mapped_pages_ = 0;
  std::set<block*, by_size_then_address> unmapped_;
  caching_events& events_;
  const segment_observers& observers_;
  // The pages one growth moved, left mapped at their old place until the
  // work enqueued before the growth has passed.
  struct move_out {
    event_handle passed{};          // recorded on the growing stream after its waits
    std::vector<block*> stretches;  // their old places, status moving
  };
  std::vector<move_out> moving_;
  // Spare handles let go while still mapped at a moving stretch: released once it is unmapped.
  std::vector<std::pair<handle, std::size_t>> orphans_;
};

}  // namespace syncmem::mr::detail::caching
