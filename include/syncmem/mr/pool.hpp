#pragma once

/// @file mr/pool.hpp
/// @brief A pool of device memory of its own, to which a region of code
/// routes its allocations with mr::use_pool (use_pool.hpp): e.g. to keep a
/// model's weights apart from its activations, to give a phase memory that
/// it can free all at once, or to hold a reserve for when the ordinary cache
/// runs out.

#include <cstddef>
#include <memory>
#include <optional>

#include "syncmem/mr/allocator_snapshot.hpp"
#include "syncmem/mr/caching_resource.hpp"

namespace syncmem::mr {

/// @brief How a pool serves the allocations routed to it.
struct pool_options {
  /// @brief Routed allocations go to the ordinary resource first, and to the
  /// pool only when that one is out of memory (a reserve).
  bool use_on_oom_only = false;
  /// @brief Large cached blocks are never split: a request takes a free block
  /// of about its own size (at most 20 MiB larger) or new memory, never a
  /// piece of a bigger one (caching_options::max_split_size at 1 MiB; small
  /// requests, up to 1 MiB, share 2 MiB segments as ever).
  bool never_split = false;
  /// @brief The most bytes the pool may reserve from the device; none when empty.
  std::optional<std::size_t> limit;
  /// @brief A caching_resource of the pool's device whose statistics and
  /// limit count the pool's memory too, as PyTorch counts a MemPool's in
  /// memory_stats() and under the memory fraction: what the pool reserves and
  /// hands out shows in its statistics, and the pool grows only within its
  /// limit. It must outlive the pool. The pool's resource then keeps no
  /// per-thread caches, so that every allocation and free is counted there
  /// at once.
  caching_resource* counts_in = nullptr;
  /// @brief The options of the pool's own caching_resource (the growable
  /// range, say); never_split and limit above are applied over them.
  caching_options caching{};
};

/// @brief A pool of device memory: a caching_resource of its own, whose
/// statistics and snapshot count only what was allocated from it. Allocations
/// reach it through mr::use_pool (routing the allocations that code makes
/// through any caching_resource of the pool's device, the default resource
/// included) or directly through resource().
///
/// Free every block of a pool before destroying it (freeing through the
/// resource that allocated it, as usual: the routing takes the block back to
/// its pool); blocks still live then are reported and become invalid.
class pool {
 public:
  /// @param device the device whose memory the pool holds
  /// @param options see pool_options
  /// @param upstream where its segments come from instead of the device (a
  ///   device resource of `device` that outlives the pool)
  /// @throws syncmem::logic_error for an invalid device or upstream
  explicit pool(device_id device, pool_options options = {}, memory_resource* upstream = nullptr);
  ~pool();
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;

  [[nodiscard]] device_id device() const noexcept { return device_; }
  [[nodiscard]] const pool_options& options() const noexcept { return options_; }
  /// @brief The resource behind the pool, to allocate from it directly.
  [[nodiscard]] caching_resource& resource() noexcept { return *resource_; }

  /// @brief Gives every free block back to the device (caching_resource::empty_cache).
  void empty_cache() { resource_->empty_cache(); }
  /// @brief What the pool has done and holds, and only the pool.
  [[nodiscard]] caching_statistics statistics() const { return resource_->statistics(); }
  /// @brief The pool's segments and blocks, and only the pool's.
  [[nodiscard]] allocator_snapshot snapshot() const { return resource_->snapshot(); }

 private:
  device_id device_;
  pool_options options_;
  std::unique_ptr<caching_resource> resource_;
};

}  // namespace syncmem::mr
