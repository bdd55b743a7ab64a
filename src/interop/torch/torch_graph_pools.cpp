#include "torch_graph_pools.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "core/capture_registry.hpp"
#include "syncmem/cuda/interop.hpp"

namespace syncmem::interop {
namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;

// PyTorch's checkpointed pool state: the blocks of one graph pool, and which were live.
struct pool_checkpoint final : alloc::AllocatorState {
  pool_checkpoint(c10::DeviceIndex d, c10::MempoolId_t pool, mr::graph_pool_checkpoint b)
      : device{d}, id{pool}, blocks{std::move(b)} {}
  c10::DeviceIndex device;
  c10::MempoolId_t id;
  mr::graph_pool_checkpoint blocks;
};

}  // namespace

std::uint64_t torch_graph_pools::begin(c10::DeviceIndex device, c10::MempoolId_t id,
                                       std::function<bool(cudaStream_t)> filter) {
  std::lock_guard lock{mutex_};
  use& u = pools_[{device, id}];
  TORCH_CHECK(u.capture == 0, "syncmem.torch: beginAllocateToPool: pool (", id.first, ", ", id.second,
              ") of cuda:", static_cast<int>(device), " already has a capture allocating to it");
  // The capture is registered before PyTorch begins it (as PyTorch's own
  // allocator does); `filter` accepts the streams it covers once it runs.
  u.capture = syncmem::detail::external_capture_began(
      device_id::cuda(device), syncmem::detail::graph_pool_access::state(u.pool),
      [f = std::move(filter)](stream_handle s) { return f(syncmem::cuda::native(s)); });
  ++u.uses;
  return u.pool.id();
}

void torch_graph_pools::end(c10::DeviceIndex device, c10::MempoolId_t id) {
  std::lock_guard lock{mutex_};
  const auto it = pools_.find({device, id});
  TORCH_CHECK(it != pools_.end() && it->second.capture != 0,
              "syncmem.torch: endAllocateToPool: no capture of cuda:", static_cast<int>(device), " allocates to pool (",
              id.first, ", ", id.second, ")");
  syncmem::detail::external_capture_ended(std::exchange(it->second.capture, 0));
}

void torch_graph_pools::release(c10::DeviceIndex device, c10::MempoolId_t id) {
  graph_pool dropped;  // released after the lock: freeing a pool's segments waits for the device
  {
    std::lock_guard lock{mutex_};
    const auto it = pools_.find({device, id});
    if (it == pools_.end()) return;  // as PyTorch's: releasing a pool nothing used is harmless
    if (--it->second.uses > 0) return;
    if (it->second.capture != 0) syncmem::detail::external_capture_ended(it->second.capture);
    dropped = std::move(it->second.pool);
    pools_.erase(it);
  }
  // Not during another capture (a graph tree releases pools while it records the next graph).
  syncmem::detail::release_after_captures(syncmem::detail::graph_pool_access::state(dropped));
}

int torch_graph_pools::use_count(c10::DeviceIndex device, c10::MempoolId_t id) {
  std::lock_guard lock{mutex_};
  const auto it = pools_.find({device, id});
  return it == pools_.end() ? 0 : it->second.uses;
}

bool torch_graph_pools::contains(c10::DeviceIndex device, c10::MempoolId_t id) {
  std::lock_guard lock{mutex_};
  return pools_.count({device, id}) != 0;
}

std::vector<std::pair<c10::MempoolId_t, graph_pool>> torch_graph_pools::pools(c10::DeviceIndex device) {
  std::lock_guard lock{mutex_};
  std::vector<std::pair<c10::MempoolId_t, graph_pool>> out;
  for (const auto& [k, u] : pools_) {
    if (k.first == device) out.emplace_back(k.second, u.pool);
  }
  return out;
}

graph_pool torch_graph_pools::pool_of(c10::DeviceIndex device, c10::MempoolId_t id, const char* what) {
  std::lock_guard lock{mutex_};
  const auto it = pools_.find({device, id});
  TORCH_CHECK(it != pools_.end(), "syncmem.torch: ", what, ": no CUDA graph pool (", id.first, ", ", id.second,
              ") on cuda:", static_cast<int>(device));
  return it->second.pool;
}

std::shared_ptr<alloc::AllocatorState> torch_graph_pools::checkpoint(mr::caching_resource& resource,
                                                                     c10::DeviceIndex device, c10::MempoolId_t id) {
  const graph_pool pool = pool_of(device, id, "getCheckpointState");
  return std::make_shared<pool_checkpoint>(device, id, resource.checkpoint(pool));
}

mr::graph_pool_restored torch_graph_pools::restore(mr::caching_resource& resource, c10::DeviceIndex device,
                                                   const std::shared_ptr<alloc::AllocatorState>& state) {
  const auto checkpoint = std::dynamic_pointer_cast<pool_checkpoint>(state);
  TORCH_CHECK(checkpoint != nullptr && checkpoint->device == device,
              "syncmem.torch: setCheckpointPoolState: the state is not a checkpoint syncmem.torch made of cuda:",
              static_cast<int>(device));
  (void)pool_of(device, checkpoint->id, "setCheckpointPoolState");  // the pool is still there
  try {
    return resource.restore(checkpoint->blocks);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "syncmem.torch: setCheckpointPoolState on cuda:", static_cast<int>(device), ": ", e.what());
  }
}

bool torch_graph_pools::live_blocks_are(mr::caching_resource& resource, c10::DeviceIndex device, c10::MempoolId_t id,
                                        const std::unordered_set<void*>& expected) {
  const mr::graph_pool_checkpoint now = resource.checkpoint(pool_of(device, id, "checkPoolLiveAllocations"));
  return now.live.size() == expected.size() &&
         std::all_of(now.live.begin(), now.live.end(),
                     [&](const mr::graph_pool_block& b) { return expected.count(b.ptr) != 0; });
}

}  // namespace syncmem::interop
