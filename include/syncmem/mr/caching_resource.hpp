#pragma once

/// @file mr/caching_resource.hpp
/// @brief The stream-ordered caching allocator for device memory: the default
/// resource of every device.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "syncmem/mr/allocator_snapshot.hpp"
#include "syncmem/mr/caching_options.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/mr/segment_observer.hpp"

namespace syncmem {
class graph_pool;
}  // namespace syncmem

namespace syncmem::mr {

namespace detail {
class caching_state;
namespace caching {
class private_pools;
}
}  // namespace detail

/// @brief What a caching_resource has done and holds. Byte counts of blocks
/// are block sizes (requests rounded up to 512 bytes); `requested` counts the
/// bytes asked for. The graph pools' memory (see graph_pool) counts too, as
/// PyTorch counts its private pools'.
///
/// Exact whenever no allocate or deallocate runs at the moment it is read.
/// Peaks are exact when one thread at a time allocates; when several do at
/// once, a peak may count bytes that another thread had already put back
/// into its own cache, never more than those.
struct caching_statistics {
  std::size_t allocated_bytes = 0;       ///< in blocks handed out now
  std::size_t peak_allocated_bytes = 0;  ///< since creation or reset_peaks()
  std::size_t requested_bytes = 0;       ///< asked for by live allocations
  std::size_t peak_requested_bytes = 0;
  std::size_t reserved_bytes = 0;  ///< held from the device: segments and mapped pages
  std::size_t peak_reserved_bytes = 0;
  std::size_t cached_bytes = 0;        ///< reserved and free for reuse, per-thread caches included
  std::size_t pending_bytes = 0;       ///< freed, waiting for streams recorded with record_stream
  std::size_t largest_free_block = 0;  ///< the largest block that can be handed out without new memory
  std::uint64_t live_allocations = 0;
  std::uint64_t allocations = 0;  ///< allocate calls that succeeded (zero-byte ones excluded)
  std::uint64_t deallocations = 0;
  std::uint64_t cache_hits = 0;           ///< allocations served from cached memory
  std::uint64_t thread_cache_hits = 0;    ///< of those, served from the calling thread's cache without a lock
  std::uint64_t cache_misses = 0;         ///< allocations that needed new memory from the device
  std::uint64_t splits = 0;               ///< free blocks split to fit a request
  std::uint64_t merges = 0;               ///< freed blocks merged with a free neighbour
  std::uint64_t segments = 0;             ///< segments held now (a growable range counts once)
  std::uint64_t segment_allocations = 0;  ///< segments or page runs obtained from the device
  std::uint64_t segment_releases = 0;     ///< segments or page runs given back
  std::uint64_t stream_waits = 0;         ///< blocks taken from another stream's free memory (with an event)
  std::uint64_t oom_retries = 0;          ///< failed device allocations retried after freeing the cache
  std::uint64_t ooms = 0;                 ///< out_of_memory thrown
  // Totals since creation (PyTorch's "allocated" and "freed" of allocated_bytes
  // and requested_bytes); each *_freed is its total less what is live now.
  std::uint64_t total_allocated_bytes = 0;  ///< block bytes of every allocation
  std::uint64_t total_freed_bytes = 0;      ///< block bytes of every deallocation
  std::uint64_t total_requested_bytes = 0;  ///< bytes asked for by every allocation
  std::uint64_t total_requested_freed_bytes = 0;
};

/// @brief A live allocation of a caching_resource (caching_resource::allocation_info).
struct live_allocation {
  std::size_t requested_bytes;  ///< the bytes asked for
  /// @brief The bytes it holds: the request rounded up to
  /// caching_resource::granularity, or more where the rest of a free block
  /// was not split off (what statistics() counts as allocated); a graph
  /// pool's block is a whole segment.
  std::size_t block_bytes;
  stream_view stream;  ///< the stream it was allocated on (the one to free it on)
  segment_pool pool;   ///< where it lives
};

/// @brief A block of a graph_pool that a checkpoint found live (see
/// caching_resource::checkpoint).
struct graph_pool_block {
  void* ptr;
  live_allocation allocation;
};

/// @brief Which blocks of one graph_pool a caching_resource held, and which
/// of them were live, at one moment (PyTorch's checkpointed pool state, which
/// CUDA graph trees restore before they record a graph on another path).
struct graph_pool_checkpoint {
  std::uint64_t pool_id = 0;                            ///< graph_pool::id()
  std::vector<std::pair<void*, std::size_t>> segments;  ///< every segment of the pool, by address, with its bytes
  std::vector<graph_pool_block> live;                   ///< its blocks that were handed out
  /// @brief Of the segments, those that grow (one per stream that allocated
  /// large blocks in the pool, as PyTorch's expandable segments): each one's
  /// start and its stream. Not needed by restore.
  std::vector<std::pair<void*, stream_view>> growable;
};

/// @brief What caching_resource::restore changed.
struct graph_pool_restored {
  /// @brief Blocks that were live and are freed now: their owners must not free them again.
  std::vector<graph_pool_block> freed;
  /// @brief Blocks live at the checkpoint, handed out again as they were then
  /// (a block may be in both lists): each is freed as any allocation is.
  std::vector<graph_pool_block> allocated;
};

/// @brief A caching, stream-ordered allocator of device memory for one device.
///
/// Memory comes from the device (cudaMalloc, or the emulated device) in
/// segments, or from an upstream resource when one is given, and is cached:
/// freed blocks are kept and handed out again without calling the device.
///
/// - Sizes: requests are rounded up to 512 bytes. Requests up to 1 MiB are
///   packed into shared 2 MiB segments; larger ones are cut from segments
///   sized to them (rounded to 2 MiB), or from a growable range (options).
///   Free blocks are found by a two-level segregated-fit index (constant
///   time, within 1/32 of the best fit), split, and merged with free
///   neighbours when freed.
/// - Streams (the contract of memory_resource): a freed block belongs to the
///   stream it was freed on and is handed out again at once to work on that
///   stream. record_stream() declares use on other streams: the block then
///   waits after its free until events recorded on those streams have passed
///   (polled, never waited for on the host). When a stream's own free memory
///   does not fit a request, free memory of another stream is taken by
///   making the allocating stream wait for an event on that stream (no host
///   synchronisation) before new memory is reserved.
/// - Speed: each thread keeps a small cache of the blocks it freed, by stream
///   and size, and reuses them without any lock shared with other threads;
///   the caches go back to the shared pools when the thread exits, on
///   empty_cache(), before the pools grow, when memory runs short, and when
///   the resource is destroyed.
/// - Near the limit or the device's memory (past half of it), large blocks
///   grow in a growable range instead of new segments, and once memory runs
///   out its growths take idle pages from anywhere in it first
///   (caching_options::compact_under_pressure): memory freed in pieces then
///   serves any size, where segments would keep it for their own blocks.
/// - Out of memory: the per-thread caches and pending blocks are reclaimed,
///   wholly free segments are released, and the allocation is tried again;
///   only then is syncmem::out_of_memory thrown, filled in (device free and
///   total, reserved, in use, largest free block, limit) with a hint when
///   fragmentation is the cause.
/// - Streams destroyed through syncmem::stream are noticed: memory freed on
///   them goes back to all streams once their work has completed. A stream
///   destroyed behind syncmem's back (cudaStreamDestroy on a handle wrapped
///   with make_stream_view) must be announced first with release_stream().
///
/// Each caching_resource is a pool of its own. The one every device uses by
/// default is mr::default_resource(device) (per_device_resource.hpp); making
/// another with this constructor makes a second pool beside it, which is how
/// several pools are made on purpose.
///
/// Alignment up to 256 bytes. Thread safety: every member function may be
/// called from many threads at once. See docs/allocator.md for the design.
class caching_resource final : public memory_resource {
 public:
  /// @param device the device whose memory is cached
  /// @param options see caching_options (SYNCMEM_ALLOC_CONF is not read here:
  ///   pass caching_options::from_environment() for that)
  /// @param upstream where ordinary segments come from instead of the device
  ///   directly (a device resource of `device` that outlives this one), e.g. a
  ///   failure_adaptor in tests; growable segments always use the device
  /// @throws syncmem::logic_error for an invalid device, or an upstream of
  ///   another device or kind
  explicit caching_resource(device_id device, caching_options options = {}, memory_resource* upstream = nullptr);
  /// @brief Releases every segment to the device. Allocations still live at
  /// that point are reported (logged) and become invalid.
  ~caching_resource() override;

  [[nodiscard]] std::string name() const override;
  [[nodiscard]] const caching_options& options() const noexcept;
  /// @brief The upstream given at construction, or nullptr.
  [[nodiscard]] memory_resource* upstream() const noexcept;
  /// @brief Whether large blocks live in a growable range now (options ask
  /// for it, or it compacts under pressure, and the device supports it).
  [[nodiscard]] bool expandable() const noexcept;

  /// @brief Declares that the live allocation `p` is used on `stream` too:
  /// after it is freed, it is not handed out again until the work enqueued on
  /// `stream` before the free has completed. A block of a graph_pool (made
  /// during a capture) is left alone: its reuse follows the order in which
  /// the pool's graphs were captured (docs/graphs.md), not streams.
  /// @throws syncmem::logic_error when `p` is not a live allocation of this
  ///   resource, or `stream` belongs to another device
  void record_stream(void* p, stream_view stream);

  /// @brief Announces that `stream` is about to be destroyed: memory freed on
  /// it stops being tied to it (it goes back to all streams once the work
  /// enqueued on it so far has completed). syncmem::stream does this itself.
  void release_stream(stream_view stream);

  /// @brief Gives cached free memory back to the device: wholly free
  /// segments, and (growable range) every free page. Synchronises the device.
  void empty_cache();
  /// @brief Like empty_cache(), but stops once at most `max_cached_bytes` of
  /// free memory stay cached. Returns the bytes given back.
  std::size_t trim(std::size_t max_cached_bytes);

  /// @brief Changes the limit on reserved bytes (nullopt: none). Memory
  /// already reserved above a lower limit is not released by this call.
  void set_limit(std::optional<std::size_t> limit_bytes);
  /// @brief The limit on reserved bytes now (limit_mb, or the last
  /// set_limit), or nullopt when there is none.
  [[nodiscard]] std::optional<std::size_t> limit() const noexcept;

  /// @brief Requests are rounded up to a multiple of this (512 bytes).
  static constexpr std::size_t granularity = 512;

  /// @brief What the resource knows of `p`, an allocation it handed out that
  /// is not freed yet: the bytes asked for and held, the stream it was
  /// allocated on and its pool. Blocks routed to a pool by mr::use_pool and
  /// blocks of graph pools (allocated during a capture) are answered too.
  /// Cheap when the calling thread allocated `p` (no shared lock);
  /// otherwise it takes the resource's lock.
  /// @returns std::nullopt when `p` is not a live allocation of this resource
  ///   (never handed out, already freed, or an address inside a block)
  [[nodiscard]] std::optional<live_allocation> allocation_info(const void* p) const;

  /// @brief The blocks of `pool` that this resource holds (allocated during
  /// captures into it, or while a capture route took eager allocations), and
  /// which of them are live now.
  [[nodiscard]] graph_pool_checkpoint checkpoint(const graph_pool& pool) const;
  /// @brief Puts the blocks of the checkpoint's pool back as the checkpoint
  /// found them: every block live now is freed, then every block live at the
  /// checkpoint is handed out again, at its address, with its request and
  /// stream. Blocks the pool gained since stay, free. For CUDA graph trees:
  /// the caller guarantees that no work uses the freed blocks any more, and
  /// that their owners drop them without freeing.
  /// @throws syncmem::logic_error when a block of the checkpoint is no longer
  ///   the pool's (its graph_pool went), or the checkpoint is of another
  ///   resource; nothing is changed then
  graph_pool_restored restore(const graph_pool_checkpoint& checkpoint);

  [[nodiscard]] caching_statistics statistics() const;
  /// @brief Sets each peak to its current value.
  void reset_peaks();
  /// @brief Segments, blocks, streams and labels now. Per-thread caches are
  /// returned to the shared pools first, so that their blocks show as free.
  [[nodiscard]] allocator_snapshot snapshot() const;

  /// @brief Tells `observer` of every ordinary segment held now, then of each
  /// segment obtained and (before it is given back) released from now on, until
  /// it is removed or the resource is destroyed (then each segment is reported
  /// released and the observer is told, see segment_observer); likewise of the
  /// memory of its graph pools (segment_observer::graph_pool_added).
  /// @throws syncmem::logic_error for a null observer
  void add_segment_observer(std::shared_ptr<segment_observer> observer);
  /// @brief Stops telling `observer`; returns whether it was added.
  bool remove_segment_observer(const segment_observer* observer) noexcept;

 private:
  friend class pool;  // pool_options::counts_in
  // This resource's memory counts in `other`'s statistics and limit too.
  void count_in(const caching_resource& other);

  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override;

  std::shared_ptr<detail::caching_state> state_;             // shared with per-thread caches that outlive the resource
  std::shared_ptr<detail::caching::private_pools> private_;  // allocations during stream capture (graph_pool.hpp)
};

}  // namespace syncmem::mr
