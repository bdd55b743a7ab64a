#pragma once

// The bookkeeping of caching_resource: blocks (pieces of device memory, free
// or handed out), the segments they tile, and a store that recycles block
// records. Everything here is guarded by the resource's lock, except the
// atomic fields, which the thread holding a block also writes on the fast
// path (see caching_state.cpp).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "syncmem/event.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::mr::detail::caching {

inline constexpr std::size_t granule = 512;  // block sizes and offsets are multiples of this

[[nodiscard]] inline std::size_t round_up(std::size_t n, std::size_t a) noexcept { return (n + a - 1) / a * a; }
[[nodiscard]] inline std::size_t round_down(std::size_t n, std::size_t a) noexcept { return n / a * a; }

enum class pool_kind : std::uint8_t { small, large };

enum class block_status : std::uint8_t {
  free,       // in its pool's free index
  allocated,  // handed out (to a caller or to a per-thread cache)
  pending,    // freed, waiting for events before it joins its pool
  unmapped,   // a growable range's address space with no memory behind it
  moving,     // a growable range's pages mapped elsewhere too: unmapped once earlier work has passed
};

struct segment;
struct stream_pool;

// Aligned to a cache line: the fast path writes the atomic fields of the
// blocks its thread holds, and blocks held by different threads must not
// share a line.
struct alignas(64) block {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;
  segment* seg = nullptr;
  block* prev = nullptr;  // neighbours in address order within the segment
  block* next = nullptr;
  block* link_prev = nullptr;  // in a free index list, or the pending list
  block* link_next = nullptr;
  stream_pool* owner = nullptr;  // free or pending: the pool it (re)joins
  block_status status = block_status::free;
  std::uint8_t index_fl = 0;  // in a free index: the size class it is listed under
  std::uint8_t index_sl = 0;
  std::uint32_t pending_uses = 0;   // events queued in pending_frees that must pass before reuse
  std::vector<stream_handle> uses;  // streams declared with record_stream

  // Written by the thread that holds the block, read under the lock.
  std::atomic<stream_handle> stream{};    // the stream it was handed out on
  std::atomic<std::size_t> requested{0};  // bytes asked for
  std::atomic<std::size_t> key{0};        // the request rounded to the granule
  std::atomic<std::uint32_t> label{0};    // interned allocation label
  // Changes whenever the block changes hands, so that a stale per-thread
  // record of it is recognised.
  std::atomic<std::uint32_t> generation{0};
  std::atomic<bool> needs_slow_free{false};  // has uses: freeing takes the lock

  [[nodiscard]] std::uintptr_t end() const noexcept { return ptr + size; }
};

// Bumps a block's generation. Its one writer at a time is whoever holds the
// block (the resource, under its lock, or the thread whose cache it is in),
// so a plain load and store do; others only read it.
inline void next_generation(block* b) noexcept {
  b->generation.store(b->generation.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

struct segment {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  pool_kind kind = pool_kind::large;
  bool growable = false;
  stream_handle stream{};  // the stream it was first reserved for
  block* first = nullptr;
};

// Block records, recycled. Addresses stay valid for the store's life, so a
// per-thread cache may keep a pointer to a record it no longer owns and find
// out from its generation that it is stale.
class block_store {
 public:
  block* make() {
    block* b = free_;
    if (b != nullptr) {
      free_ = b->link_next;
    } else {
      b = &storage_.emplace_back();
    }
    b->ptr = 0;
    b->size = 0;
    b->seg = nullptr;
    b->prev = b->next = b->link_prev = b->link_next = nullptr;
    b->owner = nullptr;
    b->status = block_status::free;
    b->pending_uses = 0;
    b->uses.clear();
    b->stream.store(stream_handle{}, std::memory_order_relaxed);
    b->requested.store(0, std::memory_order_relaxed);
    b->key.store(0, std::memory_order_relaxed);
    b->label.store(0, std::memory_order_relaxed);
    b->needs_slow_free.store(false, std::memory_order_relaxed);
    return b;
  }

  void release(block* b) noexcept {
    next_generation(b);
    b->link_next = free_;
    free_ = b;
  }

 private:
  std::deque<block> storage_;
  block* free_ = nullptr;
};

// Unlinks `b` from its segment's address list (its neighbours close up).
inline void unlink_from_segment(block* b) noexcept {
  if (b->prev != nullptr) {
    b->prev->next = b->next;
  } else {
    b->seg->first = b->next;
  }
  if (b->next != nullptr) b->next->prev = b->prev;
}

// Links `b` into the address list right after `at`.
inline void link_after(block* at, block* b) noexcept {
  b->prev = at;
  b->next = at->next;
  if (at->next != nullptr) at->next->prev = b;
  at->next = b;
}

// Links `b` into the address list right before `at`.
inline void link_before(block* at, block* b) noexcept {
  b->next = at;
  b->prev = at->prev;
  if (at->prev != nullptr) {
    at->prev->next = b;
  } else {
    at->seg->first = b;
  }
  at->prev = b;
}

}  // namespace syncmem::mr::detail::caching
