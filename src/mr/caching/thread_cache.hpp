#pragma once

// The per-thread side of caching_resource: each thread keeps the blocks it
// frees, by (stream, rounded size), and hands them out again without taking
// the resource's lock; and it remembers the blocks it handed out, so that
// freeing one finds its record without the lock either.
//
// A thread_cache belongs to one thread and one resource. Its bins are guarded
// by its own spinlock, which other threads take only to take the blocks back
// (memory short, empty_cache, snapshot, a stream destroyed, the resource
// destroyed). The table of handed-out blocks and the counters are written by
// the owning thread only.

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/ignored_failure.hpp"
#include "mr/caching/block.hpp"
#include "mr/caching/spinlock.hpp"

namespace syncmem::mr::detail {
class caching_state;
}

namespace syncmem::mr::detail::caching {

inline constexpr std::size_t bin_slots = 8;
inline constexpr std::size_t bin_bytes = std::size_t{32} << 20;  // a bin holds about this much (at least one block)

// Blocks freed on one stream for requests of one rounded size.
struct bin {
  stream_handle stream{};
  std::size_t key = 0;  // 0: an unused slot of the table
  std::uint32_t count = 0;
  std::uint32_t capacity = 0;
  std::array<block*, bin_slots> items{};
};

// Open addressing over (stream, key), linear probing. Bins are not removed
// one by one; the table is rebuilt without its empty bins when it fills up.
class bin_table {
 public:
  [[nodiscard]] bin* find(stream_handle s, std::size_t key) noexcept {
    if (slots_.empty()) return nullptr;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = hash(s, key) & mask;; i = (i + 1) & mask) {
      bin& b = slots_[i];
      if (b.key == key && b.stream == s) return &b;
      if (b.key == 0) return nullptr;
    }
  }

  // May allocate (grow the table).
  [[nodiscard]] bin* find_or_add(stream_handle s, std::size_t key) {
    if (bin* b = find(s, key)) return b;
    if ((used_ + 1) * 2 > slots_.size()) rebuild();
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = hash(s, key) & mask;
    while (slots_[i].key != 0) i = (i + 1) & mask;
    bin& b = slots_[i];
    b.stream = s;
    b.key = key;
    b.count = 0;
    b.capacity = static_cast<std::uint32_t>(key >= bin_bytes ? 1 : std::min(bin_slots, bin_bytes / key));
    ++used_;
    return &b;
  }

  // Takes every block out: f(stream, block).
  template <class F>
  void drain(F&& f) {
    for (bin& b : slots_) {
      for (std::uint32_t i = 0; i < b.count; ++i) f(b.stream, b.items[i]);
      b.count = 0;
    }
  }

  // Takes out the blocks of one stream.
  template <class F>
  void drain_stream(stream_handle s, F&& f) {
    for (bin& b : slots_) {
      if (b.key == 0 || b.stream != s) continue;
      for (std::uint32_t i = 0; i < b.count; ++i) f(b.stream, b.items[i]);
      b.count = 0;
    }
  }

 private:
  static std::size_t hash(stream_handle s, std::size_t key) noexcept {
    const std::uint64_t h = (static_cast<std::uint64_t>(static_cast<std::uintptr_t>(s)) >> 4) * 0x9E3779B97F4A7C15ULL ^
                            (static_cast<std::uint64_t>(key) / granule) * 0xC2B2AE3D27D4EB4FULL;
    return static_cast<std::size_t>(h ^ (h >> 31));
  }

  // Drops the empty bins (they come back when used), growing the table
  // while it is small or the bins in use need the room.
  void rebuild() {
    std::size_t live = 0;
    for (const bin& b : slots_) live += b.key != 0 && b.count > 0 ? 1 : 0;
    std::size_t size = slots_.empty() ? 64 : (used_ < 1024 ? slots_.size() * 2 : slots_.size());
    while ((live + 1) * 2 > size) size *= 2;
    std::vector<bin> old(size);
    old.swap(slots_);
    used_ = 0;
    const std::size_t mask = slots_.size() - 1;
    for (const bin& b : old) {
      if (b.key == 0 || b.count == 0) continue;
      std::size_t i = hash(b.stream, b.key) & mask;
      while (slots_[i].key != 0) i = (i + 1) & mask;
      slots_[i] = b;
      ++used_;
    }
  }

  std::vector<bin> slots_;
  std::size_t used_ = 0;
};

// The blocks a thread handed out: pointer -> (block, generation). A record
// whose generation no longer matches the block's is stale (the block went
// back through another thread) and is ignored. Records are hints: the table
// may drop them all when it grows too large.
class handed_out_table {
 public:
  struct entry {
    std::uintptr_t ptr = 0;  // 0: unused
    block* b = nullptr;
    std::uint32_t generation = 0;
  };

  void insert(std::uintptr_t ptr, block* b, std::uint32_t generation) {
    if ((used_ + 1) * 2 > slots_.size()) grow();
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = hash(ptr) & mask;
    while (slots_[i].ptr != 0 && slots_[i].ptr != ptr) i = (i + 1) & mask;
    if (slots_[i].ptr == 0) ++used_;
    slots_[i] = {ptr, b, generation};
  }

  [[nodiscard]] const entry* find(std::uintptr_t ptr) const noexcept {
    if (slots_.empty()) return nullptr;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = hash(ptr) & mask;; i = (i + 1) & mask) {
      const entry& e = slots_[i];
      if (e.ptr == ptr) return &e;
      if (e.ptr == 0) return nullptr;
    }
  }

  // Backward-shift deletion: no tombstones, so lookups stay short.
  void erase(std::uintptr_t ptr) noexcept {
    if (slots_.empty()) return;
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = hash(ptr) & mask;
    while (slots_[i].ptr != ptr) {
      if (slots_[i].ptr == 0) return;
      i = (i + 1) & mask;
    }
    --used_;
    for (std::size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
      if (slots_[j].ptr == 0) break;
      const std::size_t home = hash(slots_[j].ptr) & mask;
      // Move j back to the hole at i unless its home lies cyclically in (i, j].
      const bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
      if (!stays) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = entry{};
  }

 private:
  static constexpr std::size_t max_entries = std::size_t{1} << 16;

  static std::size_t hash(std::uintptr_t ptr) noexcept {
    const std::uint64_t h = (static_cast<std::uint64_t>(ptr) / granule) * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(h ^ (h >> 29));
  }

  void grow() {
    if (used_ >= max_entries) {  // records of blocks freed by other threads pile up: start afresh
      std::fill(slots_.begin(), slots_.end(), entry{});
      used_ = 0;
      return;
    }
    std::vector<entry> old(slots_.empty() ? 64 : slots_.size() * 2);
    old.swap(slots_);
    used_ = 0;
    const std::size_t mask = slots_.size() - 1;
    for (const entry& e : old) {
      if (e.ptr == 0) continue;
      std::size_t i = hash(e.ptr) & mask;
      while (slots_[i].ptr != 0) i = (i + 1) & mask;
      slots_[i] = e;
      ++used_;
    }
  }

  std::vector<entry> slots_;
  std::size_t used_ = 0;
};

struct thread_cache {
  thread_cache(std::weak_ptr<caching_state> owner_state, caching_state* state_ptr, std::uint64_t resource_id,
               std::size_t budget_bytes)
      : owner{std::move(owner_state)}, state{state_ptr}, id{resource_id}, budget{budget_bytes} {}

  spinlock lock;
  // Under lock, except that the owning thread, which alone adds bins (under
  // the lock), may look one up without it; others only take blocks out.
  bin_table bins;
  std::size_t cached_bytes = 0;
  bool dead = false;  // the thread exited or the resource is gone: nothing more goes in

  // The owning thread only. A bin is made on the second miss of its (stream,
  // size): sizes that recur are cached, one-off sizes (random churn) do not
  // fill the cache.
  struct recent_miss {
    stream_handle stream{};
    std::size_t key = 0;
  };
  std::array<recent_miss, 256> recent_misses{};

  // The owning thread only:
  handed_out_table handed_out;

  // Written by the owning thread only (plain load and store, no read-modify-
  // write), read by statistics(). The deltas are what this thread changed
  // since it last added them to the resource's totals.
  std::atomic<std::int64_t> allocated_delta{0};
  std::atomic<std::int64_t> requested_delta{0};
  std::atomic<std::int64_t> live_delta{0};
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> deallocations{0};
  std::atomic<std::uint64_t> hits{0};
  // Totals of what this thread handed out, never folded (what went back is
  // these less what is live: caching_totals::report).
  std::atomic<std::uint64_t> allocated_total{0};
  std::atomic<std::uint64_t> requested_total{0};

  const std::weak_ptr<caching_state> owner;
  caching_state* const state;
  const std::uint64_t id;
  const std::size_t budget;

  // ---- the fast path, by the owning thread ----

  // A block cached for (s, key), or nullptr. Sets `cacheable` when (s, key)
  // has a bin, so that the block handed out for it may come back here.
  [[nodiscard]] block* take(stream_handle s, std::size_t key, bool& cacheable) noexcept {
    bin* const found = bins.find(s, key);  // bins are added and moved by this thread only: no lock to find one
    if (found == nullptr) {
      cacheable = note_miss(s, key);
      return nullptr;
    }
    cacheable = true;
    std::lock_guard guard{lock};
    if (found->count == 0) return nullptr;
    block* const b = found->items[--found->count];
    cached_bytes -= b->size;
    return b;
  }

  // Hands out a block that take() returned; true when this thread's totals
  // reach a new high, which the resource's totals (and peaks) must see.
  [[nodiscard]] bool hand_out(block* b, stream_handle s, std::size_t bytes, std::uint32_t label) noexcept {
    b->stream.store(s, std::memory_order_relaxed);
    b->requested.store(bytes, std::memory_order_relaxed);
    b->label.store(label, std::memory_order_relaxed);
    next_generation(b);
    remember(b, b->generation.load(std::memory_order_relaxed));
    bump(allocated_delta, static_cast<std::int64_t>(b->size));
    bump(requested_delta, static_cast<std::int64_t>(bytes));
    bump(live_delta, 1);
    bump(allocations);
    bump(hits);
    bump(allocated_total, b->size);
    bump(requested_total, bytes);
    return allocated_delta.load(std::memory_order_relaxed) > 0 || requested_delta.load(std::memory_order_relaxed) > 0;
  }

  // Records a block handed out to this thread, so that its free finds it
  // without the resource's lock. Unrecorded (out of memory), its free takes
  // the slow path.
  void remember(block* b, std::uint32_t generation) noexcept {
    try {
      handed_out.insert(b->ptr, b, generation);
    } catch (...) {
      // see above
      syncmem::detail::log_ignored("remembering a block this thread handed out");
    }
  }

  // Keeps a freed block if this thread handed it out, it needs nothing from
  // the resource, and its bin and the budget have room; false otherwise.
  [[nodiscard]] bool give_back(void* p, std::size_t bytes, stream_handle s) noexcept {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    const auto* record = handed_out.find(address);
    if (record == nullptr) return false;
    block* const b = record->b;
    const bool current = b->generation.load(std::memory_order_relaxed) == record->generation;
    handed_out.erase(address);
    if (!current || b->needs_slow_free.load(std::memory_order_acquire)) return false;
    const std::size_t key = round_up(bytes, granule);
    if (b->key.load(std::memory_order_relaxed) != key) return false;  // the size given differs: let the slow path check
    const std::size_t size = b->size;
    const auto requested_bytes = static_cast<std::int64_t>(b->requested.load(std::memory_order_relaxed));
    bin* const target = bins.find(s, key);  // bins are added by this thread only: no lock to find one
    if (target == nullptr || !keep(target, b)) return false;
    bump(allocated_delta, -static_cast<std::int64_t>(size));
    bump(requested_delta, -requested_bytes);
    bump(live_delta, -1);
    bump(deallocations);
    return true;
  }

 private:
  // A bin is made on the second miss of its (stream, size).
  bool note_miss(stream_handle s, std::size_t key) noexcept {
    auto& recent = recent_misses[(key / granule * 31 + (static_cast<std::uintptr_t>(s) >> 4)) & 255];
    if (recent.key != key || recent.stream != s) {
      recent = {s, key};
      return false;
    }
    return add_bin(s, key);
  }

  // Out of line: the lock and the table's growth would make every miss save registers.
  [[gnu::noinline]] bool add_bin(stream_handle s, std::size_t key) noexcept {
    try {
      std::lock_guard guard{lock};
      (void)bins.find_or_add(s, key);
      return true;
    } catch (...) {
      // no bin, no caching of this size
      syncmem::detail::log_ignored("adding a bin to a thread's cache");
      return false;
    }
  }

  bool keep(bin* target, block* b) noexcept {
    std::lock_guard guard{lock};
    if (dead || b->size > budget || cached_bytes > budget - b->size) return false;
    if (target->count >= target->capacity) return false;
    target->items[target->count++] = b;
    cached_bytes += b->size;
    // No request: allocation_info tells it from a live block (it stays in the pointer map).
    b->requested.store(0, std::memory_order_relaxed);
    return true;
  }

  static void bump(std::atomic<std::int64_t>& a, std::int64_t delta) noexcept {
    a.store(a.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  }
  static void bump(std::atomic<std::uint64_t>& a, std::uint64_t by = 1) noexcept {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
};

}  // namespace syncmem::mr::detail::caching
