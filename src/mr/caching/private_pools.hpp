#pragma once

// The routing layer of a caching_resource for stream capture (see
// include/syncmem/graph_pool.hpp and docs/graphs.md). While
// syncmem::begin_capture captures a stream, an allocation on it comes from
// the private pool that the resource keeps for the capture's graph_pool,
// never from the cache: a graph reads and writes the addresses it captured at
// every launch, so its memory must stay out of everyone else's hands while
// the graph lives. A private pool (mr/caching/private_pool.hpp) holds its
// memory, and reuses a free block only where stream order proves it safe:
// - a block freed in the same capture, on the stream now allocating (a
//   captured stream's work runs in the order it was captured, at every launch),
//   unless another stream used it (record_stream);
// - a block freed in the same capture, on any stream, once the graph orders
//   the allocating stream after the work that every stream using the block
//   had enqueued when it was freed (where the backend can fork captures: the
//   streams have joined, as PyTorch's graph_capture_record_stream_reuse);
// - a block freed outside the capture now open (in an earlier capture into
//   the same graph_pool, or after it), since graphs sharing a pool are
//   launched in the order they were captured and never at once.
// Its segments go back to the device when the graph_pool goes (every graph
// captured into it and every handle) and no block of it is live.
//
// A block of the ordinary cache freed on a capturing stream may still be
// used by the graph at every launch: it is held by the capture's graph_pool
// and given back to the cache when the pool goes.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.hpp"
#include "mr/caching/graph_pool_observers.hpp"
#include "mr/caching/private_pool.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::detail {
struct capture_info;
struct graph_pool_state;
struct graph_pool_usage;
}  // namespace syncmem::detail

namespace syncmem::mr::detail::caching {

class private_pools : public std::enable_shared_from_this<private_pools> {
 public:
  // Gives an ordinary block back to the cache, once its graphs are gone.
  using release_fn = std::function<void(void* p, std::size_t bytes)>;

  // The pools' memory counts toward `accounts` (the caching resource's statistics and limit).
  private_pools(device_id device, memory_resource* upstream, std::string name, release_fn release,
                std::weak_ptr<pool_accounts> accounts);
  private_pools(const private_pools&) = delete;
  private_pools& operator=(const private_pools&) = delete;

  // A block from the private pool of `capture`, the capture open on `s`.
  [[nodiscard]] void* allocate(std::size_t bytes, stream_view s, const syncmem::detail::capture_info& capture);
  // Takes `p` when it is a block of a private pool, or an ordinary block freed
  // on a capturing stream (held until the capture's graphs are gone); false
  // when the cache should take it as usual.
  [[nodiscard]] bool deallocate(void* p, std::size_t bytes, stream_view s) noexcept;
  // Whether deallocate may take a block now: a capture is open, or a block of
  // a private pool is live (the test for the hot path).
  [[nodiscard]] bool may_take() const noexcept {
    return syncmem::detail::captures_open() || live_count_.load(std::memory_order_acquire) > 0;
  }
  // caching_resource::record_stream of `p` on `s`: false unless `p` is a
  // live block of a private pool. Such a block's reuse follows the captures'
  // order, not events; but one that another stream used is not handed out
  // again by the capture that frees it (that stream may still read it there).
  bool record_stream(void* p, stream_handle s);
  // `p` as caching_resource::allocation_info answers; nullopt unless it is a live block of a private pool.
  [[nodiscard]] std::optional<live_allocation> info(const void* p);
  // The blocks of graph_pool `pool_id` here (caching_resource::checkpoint).
  [[nodiscard]] graph_pool_checkpoint checkpoint(std::uint64_t pool_id);
  // caching_resource::restore.
  graph_pool_restored restore(const graph_pool_checkpoint& c);
  // Tells `observer` of every segment of the pools now (under each pool's
  // lock, all held at once, so that nothing is told twice or missed), then of
  // those that come and go (segment_observer::graph_pool_added, _releasing).
  void observe(const std::shared_ptr<segment_observer>& observer);
  bool stop_observing(const segment_observer* observer) noexcept { return observers_->remove(observer); }
  // The resource is going: ordinary blocks held by graphs are no longer given
  // back, and the pools that outlive it tell its observers nothing more.
  void detach() noexcept;

  // Gives back an ordinary block that a graph_pool held (see deallocate).
  void give_back(void* p, std::size_t bytes) noexcept;

 private:
  device_id device_;
  memory_resource* upstream_;
  std::string name_;
  std::mutex mutex_;
  release_fn release_;  // under mutex_; empty once detached
  std::weak_ptr<pool_accounts> accounts_;
  std::shared_ptr<graph_pool_observers> observers_ = std::make_shared<graph_pool_observers>();
  std::unordered_map<std::uint64_t, std::weak_ptr<private_pool>> by_pool_;  // by graph_pool id
  std::unordered_map<void*, std::shared_ptr<private_pool>> live_;           // blocks handed out, each keeping its pool
  std::atomic<std::size_t> live_count_{0};                                  // live_.size(), read without the lock
};

}  // namespace syncmem::mr::detail::caching
