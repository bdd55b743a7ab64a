#pragma once

// Where an allocation goes when not to its resource's own cache: one list of
// routes, each a device, which allocations it takes and where it sends them,
// that every caching_resource consults once per allocation (cheaply while the
// list is empty). Three kinds register into it:
// - a capture begun by syncmem::begin_capture takes the allocations on its
//   stream and on the streams it forked to, for its graph_pool;
// - a capture another library begins (PyTorch's beginAllocateToPool) takes
//   the allocations on the streams its filter accepts, for its graph_pool;
// - an mr::use_pool scope takes the allocations of the thread that opened it,
//   for its pool (on out of memory only, if the pool says so);
// - a filter another library gives takes the allocations on the streams it
//   accepts, for a pool (PyTorch's MemPool).
// Captures come first, since a graph's memory must stay its own; then the
// routes to pools, newest (innermost) first.

#include <atomic>
#include <cstdint>
#include <optional>

#include "core/capture_registry.hpp"
#include "syncmem/device_id.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::mr {
class pool;
}  // namespace syncmem::mr

namespace syncmem::detail {

// Where a route sends an allocation: a capture's graph_pool, or a pool.
struct route_match {
  std::optional<capture_info> capture;
  mr::pool* pool = nullptr;
  bool on_oom_only = false;  // to the pool only when the resource's own cache is out of memory
};

// Routes registered, of any kind: what the hot path tests first.
inline std::atomic<int> open_routes{0};
[[nodiscard]] inline bool routes_open() noexcept { return open_routes.load(std::memory_order_acquire) > 0; }

// Where an allocation on `s` by this thread goes; nullopt for the resource's
// own cache. (A pool's own resource serves a route to a pool itself: the
// caller tells, only when a pool route matched.)
[[nodiscard]] std::optional<route_match> find_route(stream_view s);

// An mr::use_pool scope: this thread's allocations on `device` go to `pool`.
// Returns the route's number for remove_thread_route.
[[nodiscard]] std::uint64_t add_thread_route(device_id device, mr::pool* pool, bool on_oom_only);
// Ends a scope of this thread; false when the scope was not the innermost of
// its thread (it ends all the same).
bool remove_thread_route(std::uint64_t number) noexcept;
// The pool of this thread's innermost scope on `device`, or nullptr.
[[nodiscard]] mr::pool* thread_route(device_id device) noexcept;

// A pool of another library (PyTorch's MemPool under use_mem_pool): the
// allocations on `device` whose stream `covers` accepts go to `pool`, newest
// such route first, with this thread's scopes. `covers` is asked on the
// allocating thread, outside the router's lock (PyTorch's filters compare
// the thread). Returns the route's number for remove_filtered_route.
[[nodiscard]] std::uint64_t add_filtered_route(device_id device, stream_filter covers, mr::pool* pool,
                                               bool on_oom_only);
void remove_filtered_route(std::uint64_t number) noexcept;

}  // namespace syncmem::detail
