#pragma once

/// @file mr/use_pool.hpp
/// @brief Routes the calling thread's allocations to a pool for a scope.
///
/// While a use_pool lives, every allocation that this thread makes through a
/// caching_resource of the pool's device (the device's default resource
/// included, and so synced_memory, device_buffer and tensor) comes from the
/// pool, or from it only when the ordinary resource is out of memory
/// (pool_options::use_on_oom_only). Freeing such a block through the resource
/// that allocated it gives it back to the pool, from any thread, in or out of
/// the scope.
///
/// The routing belongs to the thread that made the scope: other threads are
/// not routed (PyTorch's MemPool context routes only the calling thread too,
/// which its users trip on when work moves to a worker thread). Hand a pool
/// to another thread explicitly: read `use_pool::current(device)` and open a
/// use_pool of the same pool there.
///
/// @code
/// syncmem::mr::pool activations{device};
/// {
///   syncmem::mr::use_pool scope{activations};
///   syncmem::synced_memory m{bytes, device};      // device side from `activations`
///   auto* p = syncmem::mr::use_pool::current(device);
///   std::thread worker{[p] { syncmem::mr::use_pool same{*p}; /* routed too */ }};
///   worker.join();
/// }
/// activations.empty_cache();  // once its blocks are freed
/// @endcode
///
/// Scopes nest (the innermost of a device wins) and must end in reverse
/// order of creation on their thread. Allocations on a stream that
/// syncmem::begin_capture is capturing go to the capture's graph pool first
/// (graph_pool.hpp).

#include <cstdint>

#include "syncmem/device_id.hpp"
#include "syncmem/mr/pool.hpp"

namespace syncmem::mr {

class use_pool {
 public:
  /// @brief Routes this thread's allocations on `p`'s device to `p` until destruction.
  explicit use_pool(pool& p);
  /// @brief Ends the routing; the routing of an enclosing scope, if any, resumes.
  ~use_pool();
  use_pool(const use_pool&) = delete;
  use_pool& operator=(const use_pool&) = delete;

  /// @brief The pool this thread's allocations on `device` go to now, or
  /// nullptr: what to hand to another thread.
  [[nodiscard]] static pool* current(device_id device) noexcept;

 private:
  pool* pool_;
  std::uint64_t route_;  // its route in the allocation router
};

}  // namespace syncmem::mr
