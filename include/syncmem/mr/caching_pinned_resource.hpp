#pragma once

/// @file mr/caching_pinned_resource.hpp
/// @brief Pinned host memory that is pinned once and reused: alloc + free in
/// nanoseconds where cudaHostAlloc + cudaFreeHost take milliseconds.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "syncmem/device_id.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/mr/pinned_resource.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::mr {

/// @brief How a caching_pinned_resource behaves.
struct caching_pinned_options {
  /// @brief Flags of the pinned memory, when the resource pins it itself.
  pinned_flags flags{};
  /// @brief Blocks pinned when the resource is made, ready for use: `reserve_blocks`
  /// blocks for requests of `reserve_block_bytes` bytes (see reserve()).
  std::size_t reserve_block_bytes = 0;
  std::size_t reserve_blocks = 0;
  /// @brief Free blocks kept for reuse, in bytes; a block freed beyond it is
  /// unpinned once its uses have completed. Unlimited by default.
  std::size_t max_cached_bytes = std::numeric_limits<std::size_t>::max();
  /// @brief When pinning fails (the page-locked limit, `ulimit -l`, or host
  /// memory is exhausted), hand out pageable memory instead, with one logged
  /// warning; get_pointer_attributes then says pageable. When false, allocate
  /// throws syncmem::out_of_memory.
  bool fallback_to_pageable = true;
};

/// @brief What a caching_pinned_resource holds and has done.
struct caching_pinned_statistics {
  std::uint64_t allocations = 0;      ///< calls that returned memory
  std::uint64_t hits = 0;             ///< served from a cached block
  std::uint64_t misses = 0;           ///< served by pinning a new block (or by the pageable fallback)
  std::uint64_t fallbacks = 0;        ///< served with pageable memory because pinning failed
  std::size_t bytes_pinned = 0;       ///< pinned memory held from upstream: in use, cached and pending
  std::size_t peak_bytes_pinned = 0;  ///< the most bytes_pinned has been
  std::size_t bytes_in_use = 0;       ///< blocks handed out and not yet freed (block sizes)
  std::size_t bytes_cached = 0;       ///< free blocks ready for reuse
  std::size_t bytes_pending = 0;      ///< freed blocks whose last uses have not completed yet
  std::size_t blocks_pending = 0;     ///< how many such blocks
  std::size_t bytes_pageable = 0;     ///< fallback blocks (pageable) in use or pending
};

/// @brief A cache of pinned host blocks in front of a pinned upstream
/// (a pinned_resource of its own by default).
///
/// Reuse is safe for the host: a freed block is handed out again only once
/// every use of it that the resource was told about has completed, so the
/// caller may write a block from the host as soon as allocate returns. The
/// uses it knows of are the stream given to deallocate and the streams named
/// by record_stream; it records an event on each when the block is freed, and
/// polls those events later (allocate never blocks on them). This is stricter
/// than memory_resource's rule for device memory, where reuse on the same
/// stream needs no waiting: host writes are not ordered by any stream.
///
/// Size classes: a request is served by a block of its class, so that freed
/// blocks fit later requests. Up to 32 KiB the classes are whole 4 KiB pages
/// (pinned memory is pinned by pages); above, eight classes per power of two,
/// so a block is at most 12.5% larger than the request. block_size() says the
/// class of a request.
///
/// Fast path: a request whose class has a ready block takes a lock and pops
/// it, with no CUDA call; a deallocate asks each stream of use whether it has
/// drained (cudaStreamQuery) and records an event (cudaEventRecord) only on
/// those that have not; deallocate_host_only asks nothing. The optional
/// up-front reserve pins blocks when the resource is made.
///
/// When pinning fails, the cached free blocks are unpinned and pinning is
/// tried once more; if it fails again the request is served with pageable
/// memory (see caching_pinned_options::fallback_to_pageable), which is freed
/// rather than cached.
///
/// Destruction waits for the pending uses of freed blocks and unpins every
/// block, including blocks still handed out (a warning says how many).
///
/// Thread safety: every member may be called from many threads at once.
/// See memory_resource for the rest of the contract.
class caching_pinned_resource final : public memory_resource {
 public:
  /// @brief A cache in front of a pinned_resource of `backend` made with `options.flags`.
  /// @throws syncmem::unsupported_error when `backend` has no devices
  /// @throws syncmem::out_of_memory when the up-front reserve cannot be pinned
  explicit caching_pinned_resource(device_kind backend, caching_pinned_options options = {});
  /// @brief A cache in front of `upstream`, which must hand out pinned host
  /// memory and outlive this resource.
  /// @throws syncmem::logic_error when `upstream` is not a pinned host resource
  explicit caching_pinned_resource(memory_resource& upstream, caching_pinned_options options = {});
  ~caching_pinned_resource() override;

  [[nodiscard]] std::string name() const override;
  /// @brief The resource blocks are pinned from.
  [[nodiscard]] memory_resource& upstream() const noexcept { return *upstream_; }
  [[nodiscard]] const caching_pinned_options& options() const noexcept { return options_; }

  /// @brief Declares that `p` (a block handed out and not yet freed) is used
  /// by work on `s` too: when it is freed, an event is recorded on `s` as well
  /// and the block is reused only after that work. `s` must stay valid until
  /// `p` is deallocated.
  /// @throws syncmem::logic_error when `p` is not a live block of this resource
  void record_stream(void* p, stream_view s);

  /// @brief Frees `p` whose device uses have all completed (or were declared
  /// with record_stream): no event is recorded for a stream of last use, so
  /// the block is reusable at once unless record_stream named streams.
  /// Cheaper than deallocate (no CUDA call in the common case).
  void deallocate_host_only(void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept;

  /// @brief Pins `blocks` blocks for requests of `block_bytes` bytes now and
  /// caches them, so that later requests of that class are hits.
  /// @throws syncmem::out_of_memory when pinning fails (blocks already pinned stay cached)
  void reserve(std::size_t block_bytes, std::size_t blocks);

  /// @brief Unpins every cached block that is ready (pending ones stay).
  /// @returns the bytes unpinned
  std::size_t trim() noexcept;

  /// @brief The counters and byte totals now. Polls the events of pending blocks first.
  [[nodiscard]] caching_pinned_statistics statistics();

  /// @brief The size of the block that serves a request of `bytes` bytes (0 for 0).
  [[nodiscard]] static std::size_t block_size(std::size_t bytes) noexcept;

 private:
  struct state;  // src/mr/caching_pinned_resource.cpp

  void reserve_up_front();
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override;

  std::unique_ptr<pinned_resource> owned_upstream_;
  memory_resource* upstream_;
  caching_pinned_options options_;
  std::unique_ptr<state> state_;
};

}  // namespace syncmem::mr
