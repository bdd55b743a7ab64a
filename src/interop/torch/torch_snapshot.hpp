#pragma once

// syncmem's segments in PyTorch's snapshot form (torch.cuda.memory_snapshot,
// _snapshot, MemPool.snapshot): torch_allocator::snapshot's parts.

#include <c10/cuda/CUDACachingAllocator.h>

#include "syncmem/mr/allocator_snapshot.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "torch_history.hpp"

namespace syncmem::interop {

// The segments of a caching resource or a MemPool's pool, marked as pool
// `owner`'s ({0, 0}: the default pool's), with the stacks history recorded.
void append_segments(c10::cuda::CUDACachingAllocator::SnapshotInfo& info, c10::DeviceIndex device,
                     const mr::allocator_snapshot& snap, torch_history& history, c10::MempoolId_t owner = {0, 0});

// A CUDA graph pool's segments: its live blocks, and free blocks in the gaps between them.
void append_graph_pool(c10::cuda::CUDACachingAllocator::SnapshotInfo& info, c10::DeviceIndex device,
                       c10::MempoolId_t owner, const mr::graph_pool_checkpoint& pool, torch_history& history);

}  // namespace syncmem::interop
