#pragma once

// PyTorch's CUDA graph pools under syncmem.torch (torch.cuda.graph,
// graph_pool_handle(), CUDA graph trees): each pool id of a device is a
// syncmem graph_pool, and the captures PyTorch announces for it
// (beginAllocateToPool) are registered as external captures, whose streams
// allocate from it. MemPools' ids are torch_mem_pools'; torch_allocator asks
// that first.

#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "syncmem/graph_pool.hpp"
#include "syncmem/mr/caching_resource.hpp"

namespace syncmem::interop {

class torch_graph_pools {
 public:
  // beginAllocateToPool / endAllocateToPool / releasePool of a graph pool's
  // id; begin returns syncmem's id of the pool (graph_pool::id()).
  std::uint64_t begin(c10::DeviceIndex device, c10::MempoolId_t id, std::function<bool(cudaStream_t)> filter);
  void end(c10::DeviceIndex device, c10::MempoolId_t id);
  void release(c10::DeviceIndex device, c10::MempoolId_t id);
  [[nodiscard]] int use_count(c10::DeviceIndex device, c10::MempoolId_t id);
  [[nodiscard]] bool contains(c10::DeviceIndex device, c10::MempoolId_t id);

  // The pools of `device`, by id (for snapshots).
  [[nodiscard]] std::vector<std::pair<c10::MempoolId_t, graph_pool>> pools(c10::DeviceIndex device);
  // getCheckpointState: which blocks of the pool `resource` holds, and which are live.
  [[nodiscard]] std::shared_ptr<c10::cuda::CUDACachingAllocator::AllocatorState> checkpoint(
      mr::caching_resource& resource, c10::DeviceIndex device, c10::MempoolId_t id);
  // setCheckpointPoolState: the pool put back as `state` found it.
  mr::graph_pool_restored restore(mr::caching_resource& resource, c10::DeviceIndex device,
                                  const std::shared_ptr<c10::cuda::CUDACachingAllocator::AllocatorState>& state);
  // checkPoolLiveAllocations: whether the pool's live blocks are exactly `expected`.
  [[nodiscard]] bool live_blocks_are(mr::caching_resource& resource, c10::DeviceIndex device, c10::MempoolId_t id,
                                     const std::unordered_set<void*>& expected);

 private:
  // syncmem's pool of an id, how many captures and graphs use it, and the
  // open capture allocating to it (0: none).
  struct use {
    graph_pool pool;
    int uses = 0;
    std::uint64_t capture = 0;
  };
  // The pool of `id`; `what` names PyTorch's call in the error when there is none.
  graph_pool pool_of(c10::DeviceIndex device, c10::MempoolId_t id, const char* what);

  std::mutex mutex_;
  std::map<std::pair<c10::DeviceIndex, c10::MempoolId_t>, use> pools_;
};

}  // namespace syncmem::interop
