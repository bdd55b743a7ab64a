#pragma once

// torch.cuda.MemPool under syncmem.torch: each MemPool is an mr::pool of
// syncmem's, and use_mem_pool routes the allocations its filter accepts
// (the thread's, as PyTorch defines it) to that pool through the allocation
// router. A capture into a MemPool (torch.cuda.graph(pool=mem_pool.id))
// allocates from a graph pool the MemPool keeps beside it, so that a graph's
// memory is never handed to eager code. A MemPool's memory counts in the
// device's resource (torch.cuda.memory_stats, the memory fraction), as under
// PyTorch's allocator, and goes back to the device once its last use has
// gone and its last block has been freed.
//
// Pool ids that no MemPool made (CUDA graphs' own, graph trees') stay with
// torch_allocator's graph pools: every method here says whether the id was
// a MemPool's.

#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "syncmem/graph_pool.hpp"
#include "syncmem/mr/allocator_snapshot.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/pool.hpp"

namespace syncmem::interop {

class torch_mem_pools {
 public:
  // `device_resource`: syncmem.torch's resource of a device, which outlives
  // the pools; they take its options and count in it. `pool_made`: told of
  // each pool's resource once made (the memory history watches its segments).
  using pool_made_fn = std::function<void(c10::DeviceIndex, c10::MempoolId_t, mr::caching_resource&)>;
  torch_mem_pools(std::function<mr::caching_resource&(c10::DeviceIndex)> device_resource, pool_made_fn pool_made)
      : device_resource_{std::move(device_resource)}, pool_made_{std::move(pool_made)} {}
  torch_mem_pools(const torch_mem_pools&) = delete;
  torch_mem_pools& operator=(const torch_mem_pools&) = delete;
  ~torch_mem_pools();

  // MemPool's constructor: a new pool, or one more use of it.
  void create_or_incref(c10::DeviceIndex device, c10::MempoolId_t id);
  void set_use_on_oom(c10::DeviceIndex device, c10::MempoolId_t id, bool use_on_oom);
  void set_no_split(c10::DeviceIndex device, c10::MempoolId_t id);
  [[nodiscard]] bool is_mem_pool(c10::DeviceIndex device, c10::MempoolId_t id);

  // beginAllocateToPool / endAllocateToPool / releasePool of a MemPool's id;
  // false, doing nothing, for any other id.
  bool begin(c10::DeviceIndex device, c10::MempoolId_t id, const std::function<bool(cudaStream_t)>& filter);
  bool end(c10::DeviceIndex device, c10::MempoolId_t id);
  bool release(c10::DeviceIndex device, c10::MempoolId_t id);
  [[nodiscard]] std::optional<int> use_count(c10::DeviceIndex device, c10::MempoolId_t id);
  // emptyCache(id): true for a MemPool's id, also one whose pool is gone.
  // As PyTorch's, only the pools of MemPools that are gone are emptied.
  bool empty_cache(c10::MempoolId_t id);
  // emptyCache of every pool (torch.cuda.empty_cache): the pools of MemPools
  // gone are destroyed once their blocks have all been freed, emptied before;
  // a MemPool in use keeps what it cached, as under PyTorch's allocator.
  void empty_all();
  // The pool's segments, per device, for snapshot(id); nullopt for other ids.
  [[nodiscard]] std::optional<std::vector<std::pair<c10::DeviceIndex, mr::allocator_snapshot>>> snapshot(
      c10::MempoolId_t id);
  // Every pool's segments, with its device and id (the whole allocator's snapshot).
  [[nodiscard]] std::vector<std::tuple<c10::DeviceIndex, c10::MempoolId_t, mr::allocator_snapshot>> snapshot_all();

 private:
  struct route {
    std::uint64_t eager = 0;    // the router's filtered route to the pool
    std::uint64_t capture = 0;  // the external capture into graph_memory
  };
  struct mem_pool {
    std::unique_ptr<mr::pool> pool;  // made at its first use, once no_split is known
    graph_pool graph_memory;
    bool use_on_oom = false;
    bool no_split = false;
    int uses = 0;
    std::uint64_t oom_route = 0;  // every allocation of the device, on out of memory
    std::vector<route> routes;    // open begin()s, newest last
  };
  using key = std::pair<c10::DeviceIndex, c10::MempoolId_t>;

  mr::pool& pool_of(c10::DeviceIndex device, c10::MempoolId_t id, mem_pool& p);
  // Destroys the retired pools whose blocks have all been freed.
  void sweep_retired();

  std::function<mr::caching_resource&(c10::DeviceIndex)> device_resource_;
  pool_made_fn pool_made_;
  std::mutex mutex_;
  std::map<key, mem_pool> pools_;
  std::vector<std::pair<key, std::unique_ptr<mr::pool>>> retired_;  // no use left, blocks still live
  std::set<c10::MempoolId_t> ids_seen_;                             // every MemPool's id, for calls after it is gone
};

}  // namespace syncmem::interop
