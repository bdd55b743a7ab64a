#pragma once

/// @file mr/segment_observer.hpp
/// @brief Told when a caching_resource obtains a segment from the device and
/// before it gives one back: how NCCL's user-buffer registration follows the
/// allocator's memory (syncmem::nccl::communicator::register_segments), and
/// how syncmem.torch's memory history records segments.

#include <cstddef>
#include <cstdint>

namespace syncmem::mr {

/// @brief An observer of a caching_resource's ordinary segments (the memory it
/// takes whole from the device or its upstream) and, where it has one, of the
/// pages mapped in its growable range (caching_options::expandable), as
/// stretches of the range's address space.
///
/// Both calls are made under the resource's lock: they must be quick enough to
/// sit on the allocator's slow path, must not call into the resource, and must
/// not throw (a failure is the observer's to report).
class segment_observer {
 public:
  segment_observer() = default;
  segment_observer(const segment_observer&) = delete;
  segment_observer& operator=(const segment_observer&) = delete;
  virtual ~segment_observer() = default;

  /// @brief `[base, base + bytes)` was obtained, before any block of it is
  /// handed out; also called for each segment held when the observer is added.
  virtual void segment_added(void* base, std::size_t bytes) noexcept = 0;
  /// @brief `[base, base + bytes)` is about to be given back: every block of
  /// it is free, or the resource is being destroyed. The memory is still valid.
  virtual void segment_releasing(void* base, std::size_t bytes) noexcept = 0;
  /// @brief Pages of the growable range were mapped at `[at, at + bytes)`;
  /// also called for each mapped stretch when the observer is added.
  virtual void range_mapped(void* at, std::size_t bytes) noexcept {
    (void)at;
    (void)bytes;
  }
  /// @brief The pages at `[at, at + bytes)` of the growable range are about to
  /// be unmapped (also when the resource is being destroyed).
  virtual void range_unmapping(void* at, std::size_t bytes) noexcept {
    (void)at;
    (void)bytes;
  }
  /// @brief Memory of the resource's graph pool `pool` (graph_pool::id()) at
  /// `[at, at + bytes)` was obtained: a segment of the pool's own, or, when
  /// `mapped`, pages mapped at the end of one of its growable segments. Also
  /// called for each such stretch held when the observer is added. A graph
  /// pool's memory counts in the resource's statistics, but only the graphs
  /// captured into that pool allocate from it. Called under the pool's lock
  /// (not the resource's), with the rules above.
  virtual void graph_pool_added(std::uint64_t pool, void* at, std::size_t bytes, bool mapped) noexcept {
    (void)pool;
    (void)at;
    (void)bytes;
    (void)mapped;
  }
  /// @brief What graph_pool_added told of is about to be given back (unmapped,
  /// when `mapped`): the graph pool goes, with its last graph and handle. A
  /// graph pool that outlives the resource is no longer observed.
  virtual void graph_pool_releasing(std::uint64_t pool, void* at, std::size_t bytes, bool mapped) noexcept {
    (void)pool;
    (void)at;
    (void)bytes;
    (void)mapped;
  }
  /// @brief The resource is being destroyed: segment_releasing (range_unmapping)
  /// was called for each segment (mapped stretch) it holds, and nothing more will be called (the observer
  /// must not call remove_segment_observer on it any more).
  virtual void resource_destroyed() noexcept {}
};

}  // namespace syncmem::mr
