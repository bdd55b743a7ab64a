#include "torch_mem_pools.hpp"

#include <cuda_runtime_api.h>

#include <c10/util/Exception.h>

#include <utility>

#include "core/allocation_router.hpp"
#include "core/capture_registry.hpp"
#include "syncmem/cuda/interop.hpp"

namespace syncmem::interop {
namespace {

// Whether `s` is being captured; a stream whose status cannot be read (the
// legacy stream while another captures in global mode) counts as neither.
std::optional<bool> capturing(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

torch_mem_pools::~torch_mem_pools() = default;

void torch_mem_pools::create_or_incref(c10::DeviceIndex device, c10::MempoolId_t id) {
  std::lock_guard lock{mutex_};
  mem_pool& p = pools_[{device, id}];
  ++p.uses;
  ids_seen_.insert(id);
}

bool torch_mem_pools::is_mem_pool(c10::DeviceIndex device, c10::MempoolId_t id) {
  std::lock_guard lock{mutex_};
  return pools_.count({device, id}) != 0;
}

mr::pool& torch_mem_pools::pool_of(c10::DeviceIndex device, c10::MempoolId_t id, mem_pool& p) {
  if (!p.pool) {
    mr::caching_resource& counted_in = device_resource_(device);
    mr::pool_options o;
    o.never_split = p.no_split;
    o.counts_in = &counted_in;
    o.caching = counted_in.options();
    p.pool = std::make_unique<mr::pool>(device_id::cuda(device), o);
    if (pool_made_) pool_made_(device, id, p.pool->resource());
  }
  return *p.pool;
}

void torch_mem_pools::set_use_on_oom(c10::DeviceIndex device, c10::MempoolId_t id, bool use_on_oom) {
  std::lock_guard lock{mutex_};
  const auto it = pools_.find({device, id});
  TORCH_CHECK(it != pools_.end(), "syncmem.torch: setUseOnOOM: no MemPool (", id.first, ", ", id.second,
              ") on cuda:", static_cast<int>(device));
  mem_pool& p = it->second;
  p.use_on_oom = use_on_oom;
  if (use_on_oom && p.oom_route == 0) {
    // Any allocation of the device that its own cache cannot serve may take
    // the pool's memory, as PyTorch's use_on_oom pools serve.
    p.oom_route = syncmem::detail::add_filtered_route(
        device_id::cuda(device), [](stream_handle) { return true; }, &pool_of(device, id, p), true);
  } else if (!use_on_oom && p.oom_route != 0) {
    syncmem::detail::remove_filtered_route(std::exchange(p.oom_route, 0));
  }
}

void torch_mem_pools::set_no_split(c10::DeviceIndex device, c10::MempoolId_t id) {
  std::lock_guard lock{mutex_};
  const auto it = pools_.find({device, id});
  TORCH_CHECK(it != pools_.end(), "syncmem.torch: setNoSplit: no MemPool (", id.first, ", ", id.second,
              ") on cuda:", static_cast<int>(device));
  mem_pool& p = it->second;
  if (p.no_split) return;
  // A pool is made with its options; one made already (use_on_oom came first) is made again while still unused.
  TORCH_CHECK(!p.pool || p.pool->statistics().reserved_bytes == 0,
              "syncmem.torch: setNoSplit on a MemPool that holds memory already");
  p.no_split = true;
  if (p.pool) {
    if (p.oom_route != 0) syncmem::detail::remove_filtered_route(p.oom_route);
    p.pool.reset();
    if (p.oom_route != 0) {
      p.oom_route = syncmem::detail::add_filtered_route(
          device_id::cuda(device), [](stream_handle) { return true; }, &pool_of(device, id, p), true);
    }
  }
}

bool torch_mem_pools::begin(c10::DeviceIndex device, c10::MempoolId_t id,
                            const std::function<bool(cudaStream_t)>& filter) {
  std::lock_guard lock{mutex_};
  const auto it = pools_.find({device, id});
  if (it == pools_.end()) return false;
  mem_pool& p = it->second;
  auto covers = std::make_shared<std::function<bool(cudaStream_t)>>(filter);
  route r;
  // Eager allocations go to the pool; those of a capture, to its graph memory.
  r.eager = syncmem::detail::add_filtered_route(
      device_id::cuda(device),
      [covers](stream_handle s) {
        const cudaStream_t c = syncmem::cuda::native(s);
        return capturing(c) == false && (*covers)(c);
      },
      &pool_of(device, id, p), false);
  try {
    r.capture = syncmem::detail::external_capture_began(
        device_id::cuda(device), syncmem::detail::graph_pool_access::state(p.graph_memory), [covers](stream_handle s) {
          const cudaStream_t c = syncmem::cuda::native(s);
          return capturing(c) == true && (*covers)(c);
        });
  } catch (...) {
    syncmem::detail::remove_filtered_route(r.eager);
    throw;
  }
  p.routes.push_back(r);
  ++p.uses;  // as PyTorch's: each begin holds the pool until a releasePool
  return true;
}

bool torch_mem_pools::end(c10::DeviceIndex device, c10::MempoolId_t id) {
  std::lock_guard lock{mutex_};
  const auto it = pools_.find({device, id});
  if (it == pools_.end()) return false;
  mem_pool& p = it->second;
  TORCH_CHECK(!p.routes.empty(), "syncmem.torch: endAllocateToPool: nothing allocates to MemPool (", id.first, ", ",
              id.second, ") of cuda:", static_cast<int>(device));
  const route r = p.routes.back();
  p.routes.pop_back();
  syncmem::detail::remove_filtered_route(r.eager);
  syncmem::detail::external_capture_ended(r.capture);
  return true;
}

bool torch_mem_pools::release(c10::DeviceIndex device, c10::MempoolId_t id) {
  std::unique_ptr<mr::pool> gone;  // destroyed after the lock: freeing segments waits for the device
  graph_pool graph_gone;
  {
    std::lock_guard lock{mutex_};
    const auto it = pools_.find({device, id});
    if (it == pools_.end()) return ids_seen_.count(id) != 0;
    mem_pool& p = it->second;
    if (--p.uses > 0) return true;
    for (const route& r : p.routes) {
      syncmem::detail::remove_filtered_route(r.eager);
      syncmem::detail::external_capture_ended(r.capture);
    }
    if (p.oom_route != 0) syncmem::detail::remove_filtered_route(p.oom_route);
    graph_gone = std::move(p.graph_memory);
    if (p.pool && p.pool->statistics().allocated_bytes > 0) {
      // Tensors of the pool outlive the MemPool: it goes once they are freed.
      retired_.emplace_back(it->first, std::move(p.pool));
    } else {
      gone = std::move(p.pool);
    }
    pools_.erase(it);
  }
  sweep_retired();
  return true;
}

void torch_mem_pools::sweep_retired() {
  std::vector<std::unique_ptr<mr::pool>> gone;
  {
    std::lock_guard lock{mutex_};
    for (auto it = retired_.begin(); it != retired_.end();) {
      if (it->second->statistics().allocated_bytes == 0) {
        gone.push_back(std::move(it->second));
        it = retired_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

std::optional<int> torch_mem_pools::use_count(c10::DeviceIndex device, c10::MempoolId_t id) {
  std::lock_guard lock{mutex_};
  const auto it = pools_.find({device, id});
  if (it != pools_.end()) return it->second.uses;
  if (ids_seen_.count(id) != 0) return 0;
  return std::nullopt;
}

bool torch_mem_pools::empty_cache(c10::MempoolId_t id) {
  sweep_retired();
  std::lock_guard lock{mutex_};
  if (ids_seen_.count(id) == 0) return false;
  // As PyTorch's: only a pool whose MemPool is gone gives its cached memory
  // back; a MemPool in use keeps what it cached.
  for (auto& [k, pool] : retired_) {
    if (k.second == id) pool->empty_cache();
  }
  return true;
}

void torch_mem_pools::empty_all() {
  sweep_retired();
  std::lock_guard lock{mutex_};
  for (auto& [k, pool] : retired_) pool->empty_cache();
}

std::optional<std::vector<std::pair<c10::DeviceIndex, mr::allocator_snapshot>>> torch_mem_pools::snapshot(
    c10::MempoolId_t id) {
  std::lock_guard lock{mutex_};
  if (ids_seen_.count(id) == 0) return std::nullopt;
  std::vector<std::pair<c10::DeviceIndex, mr::allocator_snapshot>> out;
  for (auto& [k, p] : pools_) {
    if (k.second == id && p.pool) out.emplace_back(k.first, p.pool->snapshot());
  }
  for (auto& [k, pool] : retired_) {
    if (k.second == id) out.emplace_back(k.first, pool->snapshot());
  }
  return out;
}

std::vector<std::tuple<c10::DeviceIndex, c10::MempoolId_t, mr::allocator_snapshot>> torch_mem_pools::snapshot_all() {
  std::lock_guard lock{mutex_};
  std::vector<std::tuple<c10::DeviceIndex, c10::MempoolId_t, mr::allocator_snapshot>> out;
  for (auto& [k, p] : pools_) {
    if (p.pool) out.emplace_back(k.first, k.second, p.pool->snapshot());
  }
  for (auto& [k, pool] : retired_) out.emplace_back(k.first, k.second, pool->snapshot());
  return out;
}

}  // namespace syncmem::interop
