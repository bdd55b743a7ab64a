#pragma once

// The state of a graph_pool, and the captures whose allocations come from
// one: registered as routes of the allocation router
// (src/core/allocation_router.hpp), which a caching_resource asks whether an
// allocation's stream is being captured (see src/mr/caching/private_pools.hpp).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "syncmem/device.hpp"
#include "syncmem/graph_pool.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::detail {

// What a graph_pool holds from the device: shared with the resources' private
// pools, which may outlive the graph_pool while one of their blocks is live.
struct graph_pool_usage {
  std::atomic<std::size_t> reserved{0};
  std::atomic<std::size_t> allocated{0};
};

struct graph_pool_state {
  explicit graph_pool_state(std::uint64_t pool_id) : id{pool_id} {}
  ~graph_pool_state();
  graph_pool_state(const graph_pool_state&) = delete;
  graph_pool_state& operator=(const graph_pool_state&) = delete;

  // Keeps `what` (a resource's private pool, a block freed during a capture)
  // until the pool goes; released in the reverse order of holding.
  void hold(std::shared_ptr<void> what);

  const std::uint64_t id;
  const std::shared_ptr<graph_pool_usage> usage = std::make_shared<graph_pool_usage>();

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<void>> held_;
};

struct graph_pool_access {
  static const std::shared_ptr<graph_pool_state>& state(const graph_pool& p) noexcept { return p.state_; }
  static graph_pool make(std::shared_ptr<graph_pool_state> s) noexcept { return graph_pool{std::move(s)}; }
};

// A capture open on a stream: its pool, and a number unique in the process.
struct capture_info {
  std::shared_ptr<graph_pool_state> pool;
  std::uint64_t number = 0;
};

// Called by begin_capture after the backend began capturing `s`.
void capture_began(stream_view s, std::shared_ptr<graph_pool_state> pool);
// Called when the capture of `s` is over, however it ended; returns its pool.
std::shared_ptr<graph_pool_state> capture_ended(stream_view s) noexcept;
// A capture another library begins and ends itself (PyTorch's CUDAGraph):
// registered before its streams capture, it covers the streams of `device`
// that `covers` accepts (a native stream handle), from then until
// external_capture_ended. Returns a token for external_capture_ended.
using stream_filter = std::function<bool(stream_handle)>;
[[nodiscard]] std::uint64_t external_capture_began(device_id device, std::shared_ptr<graph_pool_state> pool,
                                                   stream_filter covers);
void external_capture_ended(std::uint64_t token) noexcept;

// Drops `what` now, or, while a capture is open on any device, once none is:
// giving device memory back (cudaFree, a device synchronisation) during a
// capture would invalidate it. For a graph_pool or a private pool whose last
// user goes while a capture runs.
void release_after_captures(std::shared_ptr<void> what) noexcept;
// Drops what release_after_captures kept, if no capture is open now: called
// once a capture has ended in the backend (end_capture, PyTorch's endAllocateToPool).
void release_held_after_captures() noexcept;

// The capture syncmem::begin_capture opened on `s`, or an external capture
// that covers `s`, if any.
[[nodiscard]] std::optional<capture_info> capture_on(stream_view s);
// Whether the capture numbered `number` (capture_info::number) is still open.
[[nodiscard]] bool capture_open(std::uint64_t number);

}  // namespace syncmem::detail
