#include "torch_snapshot.hpp"

#include <algorithm>
#include <cstddef>
#include <utility>

namespace syncmem::interop {

namespace alloc = c10::cuda::CUDACachingAllocator;

void append_segments(alloc::SnapshotInfo& info, c10::DeviceIndex device, const mr::allocator_snapshot& snap,
                     torch_history& history, c10::MempoolId_t owner) {
  for (const auto& seg : snap.segments) {
    c10::CachingDeviceAllocator::SegmentInfo out;
    out.device = device;
    out.address = seg.address;
    out.total_size = seg.size;
    out.stream = seg.stream ? seg.stream->native_handle() : nullptr;
    out.is_large = seg.pool != mr::segment_pool::small;
    out.is_expandable = seg.pool == mr::segment_pool::expandable;
    out.owner_private_pool_id = owner;
    for (const auto& blk : seg.blocks) {
      c10::CachingDeviceAllocator::BlockInfo b;
      b.size = blk.size;
      b.requested_size = blk.requested;
      b.allocated = blk.state == mr::block_state::allocated;
      if (b.allocated && history.enabled()) b.context_when_allocated = history.context_of(seg.address + blk.offset);
      b.active = blk.state != mr::block_state::free;
      if (b.allocated) out.allocated_size += blk.size;
      if (b.active) out.active_size += blk.size;
      out.requested_size += blk.requested;
      out.blocks.push_back(std::move(b));
    }
    info.segments.push_back(std::move(out));
  }
}

void append_graph_pool(alloc::SnapshotInfo& info, c10::DeviceIndex device, c10::MempoolId_t owner,
                       const mr::graph_pool_checkpoint& pool, torch_history& history) {
  constexpr std::size_t small_size = std::size_t{1} << 20;  // PyTorch's kSmallSize
  for (const auto& [ptr, size] : pool.segments) {
    const auto live = std::find_if(pool.live.begin(), pool.live.end(),
                                   [p = ptr](const mr::graph_pool_block& b) { return b.ptr == p; });
    c10::CachingDeviceAllocator::SegmentInfo out;
    out.device = device;
    out.address =
        reinterpret_cast<std::size_t>(ptr);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast): PyTorch's form
    out.total_size = size;
    out.is_large = size > small_size;
    out.owner_private_pool_id = owner;
    c10::CachingDeviceAllocator::BlockInfo b;
    b.size = size;
    if (live != pool.live.end()) {
      out.stream = live->allocation.stream.native_handle();
      b.requested_size = live->allocation.requested_bytes;
      b.allocated = b.active = true;
      if (history.enabled()) b.context_when_allocated = history.context_of(out.address);
      out.allocated_size = out.active_size = size;
      out.requested_size = b.requested_size;
    }
    out.blocks.push_back(std::move(b));
    info.segments.push_back(std::move(out));
  }
}

}  // namespace syncmem::interop
