#include "torch_snapshot.hpp"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

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
  constexpr std::size_t small_size = std::size_t{1} << 20;     // PyTorch's kSmallSize
  constexpr std::size_t small_segment = std::size_t{2} << 20;  // PyTorch's kSmallBuffer
  std::vector<const mr::graph_pool_block*> live;
  for (const auto& b : pool.live) live.push_back(&b);
  std::sort(live.begin(), live.end(), [](const auto* x, const auto* y) { return x->ptr < y->ptr; });
  auto next = live.begin();
  for (const auto& [ptr, size] : pool.segments) {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): PyTorch's form
    const auto start = reinterpret_cast<std::size_t>(ptr);
    c10::CachingDeviceAllocator::SegmentInfo out;
    out.device = device;
    out.address = start;
    out.total_size = size;
    out.is_large = size > small_segment;
    out.owner_private_pool_id = owner;
    for (const auto& [base, on] : pool.growable) {
      if (base != ptr) continue;
      // One per stream, as PyTorch's expandable segments of a private pool.
      out.is_expandable = out.is_large = true;
      out.stream = on.native_handle();
    }
    const auto free_block = [&](std::size_t bytes) {
      c10::CachingDeviceAllocator::BlockInfo b;
      b.size = bytes;
      out.blocks.push_back(std::move(b));
    };
    std::size_t offset = 0;
    // The segment's live blocks in address order, and free blocks in the gaps.
    for (; next != live.end() && reinterpret_cast<std::size_t>((*next)->ptr) < start + size; ++next) {
      const auto at = reinterpret_cast<std::size_t>((*next)->ptr) - start;  // NOLINT: PyTorch's form
      if (at > offset) free_block(at - offset);
      const mr::live_allocation& a = (*next)->allocation;
      c10::CachingDeviceAllocator::BlockInfo b;
      b.size = a.block_bytes;
      b.requested_size = a.requested_bytes;
      b.allocated = b.active = true;
      if (history.enabled()) b.context_when_allocated = history.context_of(start + at);
      out.stream = a.stream.native_handle();
      out.is_large = out.is_large || a.block_bytes > small_size;
      out.allocated_size += a.block_bytes;
      out.requested_size += a.requested_bytes;
      out.blocks.push_back(std::move(b));
      offset = at + a.block_bytes;
    }
    if (offset < size) free_block(size - offset);
    out.active_size = out.allocated_size;
    info.segments.push_back(std::move(out));
  }
}

}  // namespace syncmem::interop
