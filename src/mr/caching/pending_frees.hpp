#pragma once

// record_stream's bookkeeping: the streams each block was declared used on,
// and the blocks freed while such a stream may still use them. A freed block
// waits, as pending, for an event recorded on each of those streams at the
// free (or at the stream's destruction, if earlier), then joins its pool; the
// events wait in use_queues, which the pinned allocator shares.
// Not thread-safe: the allocator calls it under its lock.

#include <cstddef>
#include <string>
#include <unordered_set>

#include "mr/caching/block.hpp"
#include "mr/caching/caching_events.hpp"
#include "mr/caching/stream_pools.hpp"
#include "mr/caching/use_queues.hpp"

namespace syncmem::mr::detail::caching {

class pending_frees {
 public:
  pending_frees(caching_events& events, stream_pools& pools, std::string name);
  pending_frees(const pending_frees&) = delete;
  pending_frees& operator=(const pending_frees&) = delete;

  // `s` uses the handed-out block `b` (its free then takes the slow path).
  void add_use(block* b, stream_handle s);
  // `b`, which has uses, is freed on `freed_on` for `pool`: true when it must
  // wait for other streams, and waits on the list; false when it is free now.
  bool hold(block* b, stream_handle freed_on, stream_pool& pool) noexcept;
  // The stream `s` is being destroyed: what it still has to do becomes events.
  void stream_gone(stream_handle s);
  // Moves every block whose events have passed into its pool.
  void collect();
  // Blocks until every pending block's events have passed.
  void synchronize();
  // Pending blocks of a retired pool will join `to` instead.
  void move_owner(const stream_pool& from, stream_pool& to) noexcept;

  [[nodiscard]] bool empty() const noexcept { return uses_.empty(); }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

 private:
  // The allocator's own events, on its one device.
  struct recycled_events {
    using event_type = event_handle;
    caching_events* events;

    [[nodiscard]] bool passed(event_handle e) const { return events->passed(e); }
    void wait(event_handle e) const { events->synchronize(e); }
    void release(event_handle&& e) const noexcept { events->put(e); }
  };

  void record_uses(block* b, stream_handle freed_on) noexcept;
  // Queues an event recorded on `s` now as a use of `b`.
  void add_event(block* b, stream_handle s);
  void wait_for_device() noexcept;

  caching_events& events_;
  stream_pools& pools_;
  const std::string name_;
  std::unordered_set<block*> with_uses_;
  // The events each block waits for: of pending blocks, and of handed-out
  // blocks used on a stream destroyed since.
  use_queues<block, recycled_events> uses_;
  std::size_t bytes_ = 0;
};

}  // namespace syncmem::mr::detail::caching
