#include "torch_allocator.hpp"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <exception>
#include <iomanip>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/capture_registry.hpp"
#include "syncmem/cuda/interop.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"
#include "syncmem/ipc.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "torch_snapshot.hpp"
#include "torch_uncached.hpp"

namespace syncmem::interop {

namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;
using c10::CachingDeviceAllocator::DeviceStats;

// The pointer the never-destroyed instance is reached by (PyTorch's deleters
// are plain function pointers).
std::atomic<torch_allocator*> the_allocator{nullptr};

[[noreturn]] void not_supported(std::string_view feature) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "syncmem.torch: ", feature,
                              " is not supported by syncmem's allocator yet (run without syncmem.torch.enable() "
                              "to use it)");
}

void raise_max(std::atomic<std::int64_t>& peak, std::int64_t value) {
  std::int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {}
}

c10::CachingAllocator::Stat stat(std::int64_t current, std::int64_t peak, std::int64_t allocated, std::int64_t freed) {
  c10::CachingAllocator::Stat s;
  s.current = current;
  s.peak = peak;
  s.allocated = allocated;
  s.freed = freed;
  return s;
}

// Only the aggregate of PyTorch's three pools: syncmem's statistics are not
// split by pool size.
void set_aggregate(c10::CachingAllocator::StatArray& array, const c10::CachingAllocator::Stat& s) {
  array[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)] = s;
}

std::int64_t as_int(std::uint64_t v) { return static_cast<std::int64_t>(v); }

}  // namespace

torch_allocator::torch_allocator() = default;

mr::caching_options torch_allocator::default_options() {
  mr::caching_options o;
  o.expandable = true;
  o.grow_from_idle = true;
  return o;
}

std::string torch_allocator::install() {
  if (installed()) return {};
  alloc::CUDAAllocator* current = alloc::allocator.load();
  SYNCMEM_EXPECTS(current == nullptr || !current->initialized(),
                  "syncmem.torch.enable: PyTorch's CUDA allocator (" + (current ? current->name() : std::string{}) +
                      ") is already initialized: CUDA was used in this process before; call "
                      "syncmem.torch.enable() right after `import torch`, before the first CUDA tensor");
  std::vector<device_id> made_before = mr::set_default_caching_options(default_options());
  std::erase_if(made_before, [](device_id d) { return d.kind() != device_kind::cuda; });
  static torch_allocator* instance = new torch_allocator{};  // never destroyed: tensors outlive main()
  alloc::allocator.store(instance);
  c10::SetAllocator(c10::DeviceType::CUDA, instance);
  the_allocator.store(instance);
  if (made_before.empty()) return {};
  std::string names;
  for (const device_id d : made_before) names += (names.empty() ? "" : ", ") + to_string(d);
  return "syncmem.torch.enable: the caching resource of " + names +
         " was made before (syncmem objects used the device) and keeps its options (" +
         mr::default_resource(made_before.front()).options().to_string() + ") rather than syncmem.torch's (" +
         mr::caching_options::from_environment(default_options()).to_string() +
         "): call enable() before syncmem allocates on a CUDA device";
}

bool torch_allocator::installed() noexcept {
  torch_allocator* mine = the_allocator.load();
  return mine != nullptr && alloc::allocator.load() == mine;
}

torch_allocator::per_device& torch_allocator::slot(c10::DeviceIndex device) {
  TORCH_CHECK(device >= 0 && static_cast<std::size_t>(device) < max_devices, "syncmem.torch: device index ",
              static_cast<int>(device), " is outside 0..", max_devices - 1);
  return devices_[static_cast<std::size_t>(device)];
}

mr::caching_resource& torch_allocator::caching(c10::DeviceIndex device) {
  per_device& d = slot(device);
  mr::caching_resource* r = d.resource.load(std::memory_order_acquire);
  if (r == nullptr) {
    r = &mr::default_resource(device_id::cuda(device));
    history_.watch(device, *r);
    d.resource.store(r, std::memory_order_release);
    const auto end = static_cast<std::size_t>(device) + 1;
    std::size_t seen = devices_used_end_.load(std::memory_order_acquire);
    while (seen < end && !devices_used_end_.compare_exchange_weak(seen, end, std::memory_order_acq_rel)) {}
  }
  return *r;
}

std::vector<c10::DeviceIndex> torch_allocator::used_devices() const {
  std::vector<c10::DeviceIndex> used;
  for (std::size_t i = 0; i < max_devices; ++i) {
    if (devices_[i].resource.load(std::memory_order_acquire) != nullptr)
      used.push_back(static_cast<c10::DeviceIndex>(i));
  }
  return used;
}

namespace {

// Sizes as PyTorch's out-of-memory message writes them ("800000000.00 GiB").
std::string torch_size(std::size_t bytes) {
  constexpr double kib = 1024.0;
  const auto b = static_cast<double>(bytes);
  if (bytes <= 1024) return std::to_string(bytes) + " bytes";
  if (bytes <= (std::size_t{1} << 20)) return c10::str(std::fixed, std::setprecision(2), b / kib, " KiB");
  if (bytes <= (std::size_t{1} << 30)) return c10::str(std::fixed, std::setprecision(2), b / kib / kib, " MiB");
  return c10::str(std::fixed, std::setprecision(2), b / kib / kib / kib, " GiB");
}

}  // namespace

void* torch_allocator::allocate_on(c10::DeviceIndex device, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  if (C10_UNLIKELY(!caching_enabled_.load(std::memory_order_relaxed))) {
    void* p = uncached_.allocate(device, bytes);
    TORCH_CHECK_WITH(OutOfMemoryError, p != nullptr, "CUDA out of memory. Tried to allocate ", torch_size(bytes),
                     " on GPU ", static_cast<int>(device), " with the caching allocator turned off (syncmem.torch)");
    return p;
  }
  // As PyTorch's allocator refuses it, before any arithmetic on the size can overflow.
  constexpr std::size_t one_exabyte = std::size_t{1} << 60;
  TORCH_CHECK_WITH(OutOfMemoryError, bytes < one_exabyte,
                   "CUDA out of memory. Tried to allocate more than 1EB memory.");
  mr::caching_resource& resource = caching(device);
  // Gathered before the allocation: a segment it maps or allocates carries it too.
  torch_history::context ctx = history_.enabled() ? history_.gather(alloc::RecordContext::STATE) : nullptr;
  void* p = nullptr;
  try {
    const torch_history::segment_cause cause{ctx};
    p = resource.allocate(bytes, cuda::make_stream_view(stream, device));
  } catch (const syncmem::out_of_memory& e) {
    std::vector<alloc::OutOfMemoryObserver> observers;
    {
      std::lock_guard lock{observers_mutex_};
      observers = oom_observers_;
    }
    const oom_info& info = e.info();
    history_.on_oom(device, bytes, info.device_free.value_or(0), stream);
    for (auto& observer : observers) {
      observer(device, info.in_use.value_or(0), info.device_total.value_or(0), info.device_free.value_or(0));
    }
    // PyTorch's words first (programs and PyTorch's tests match them), then syncmem's account.
    const std::size_t total = info.device_total.value_or(0);
    const std::size_t in_use = info.in_use.value_or(0);
    const std::size_t reserved = std::max(info.reserved.value_or(in_use), in_use);
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate ", torch_size(bytes), ". GPU ",
                     static_cast<int>(device), " has a total capacity of ", torch_size(total), " of which ",
                     torch_size(info.device_free.value_or(0)), " is free. Of the allocated memory ", torch_size(in_use),
                     " is allocated by PyTorch (syncmem.torch), and ", torch_size(reserved - in_use),
                     " is reserved by PyTorch but unallocated. ", e.what());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "syncmem.torch: allocating ", bytes, " bytes on cuda:", static_cast<int>(device),
                " failed: ", e.what());
  }
  per_device& d = slot(device);
  raise_max(d.peak_live, d.live.fetch_add(1, std::memory_order_relaxed) + 1);
  if (history_.enabled() || C10_UNLIKELY(c10::memoryProfilingEnabled())) {
    const auto a = resource.allocation_info(p);
    const std::size_t block = a ? a->block_bytes : bytes;
    history_.on_alloc(device, p, block, stream, std::move(ctx));
    report_to_profiler(device, p, static_cast<std::int64_t>(block));
  }
  return p;
}

// torch.profiler's memory events (profile_memory=True), as PyTorch's allocator reports them.
void torch_allocator::report_to_profiler(c10::DeviceIndex device, void* p, std::int64_t bytes) {
  if (!c10::memoryProfilingEnabled()) return;
  const mr::caching_statistics s = caching(device).statistics();
  c10::reportMemoryUsageToProfiler(p, bytes, s.allocated_bytes, s.reserved_bytes,
                                   c10::Device{c10::DeviceType::CUDA, device});
}

// The device's resource that knows `p` frees it, with the size and stream it
// was allocated with (PyTorch's blocks go back to their allocation stream).
// Usually one device is used; with several, the others answer nullopt first.
void torch_allocator::release(void* p) noexcept {
  if (p == nullptr) return;
  const std::size_t end = devices_used_end_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < end; ++i) {
    per_device& d = devices_[i];
    mr::caching_resource* const resource = d.resource.load(std::memory_order_acquire);
    if (resource == nullptr) continue;
    const std::optional<mr::live_allocation> a = resource->allocation_info(p);
    if (!a) continue;
    d.live.fetch_sub(1, std::memory_order_relaxed);
    const auto device = static_cast<c10::DeviceIndex>(i);
    if (history_.enabled() || C10_UNLIKELY(c10::memoryProfilingEnabled())) {
      try {
        history_.on_free(device, p, a->block_bytes, a->stream.native_handle(),
                         history_.gather(alloc::RecordContext::ALL));
      } catch (...) {  // NOLINT(bugprone-empty-catch): a free goes on without its history entry
      }
      resource->deallocate(p, a->requested_bytes, a->stream);
      try {
        report_to_profiler(device, p, -static_cast<std::int64_t>(a->block_bytes));
      } catch (...) {  // NOLINT(bugprone-empty-catch): nor without the profiler's
      }
      return;
    }
    resource->deallocate(p, a->requested_bytes, a->stream);
    return;
  }
  // Not a block of syncmem's: cudaMalloc'd while caching was off, or not ours
  // (raw_delete of a pointer syncmem never handed out, or freed already).
  (void)uncached_.release(p);
}

void torch_allocator::free_block(void* p) {
  if (torch_allocator* self = the_allocator.load()) self->release(p);
}

c10::DataPtr torch_allocator::allocate(std::size_t bytes) {
  const c10::DeviceIndex device = c10::cuda::current_device();
  void* p = allocate_on(device, bytes, c10::cuda::getCurrentCUDAStream(device).stream());
  return {p, p, &free_block, c10::Device{c10::DeviceType::CUDA, device}};
}

c10::DeleterFnPtr torch_allocator::raw_deleter() const { return &free_block; }

void torch_allocator::copy_data(void* dest, const void* src, std::size_t count) const {
  C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
}

bool torch_allocator::initialized() { return true; }

void torch_allocator::emptyCache(c10::MempoolId_t mempool_id) {
  if (mempool_id != c10::MempoolId_t{0, 0}) {
    // A CUDA graph's pool gives its memory back by itself once its graphs and
    // blocks are gone; while they live there is nothing to give, as in PyTorch's.
    (void)mem_pools_.empty_cache(mempool_id);
    return;
  }
  // The segments given back carry the stack of this call, as PyTorch's do.
  const torch_history::segment_cause cause{history_.gather(alloc::RecordContext::ALL)};
  // Blocks that importers in other processes have let go of come back to the cache first.
  (void)syncmem::ipc::collect();
  for (c10::DeviceIndex device : used_devices()) caching(device).empty_cache();
  mem_pools_.empty_all();
}

DeviceStats torch_allocator::getDeviceStats(c10::DeviceIndex device) {
  per_device& d = slot(device);
  const mr::caching_statistics s = caching(device).statistics();
  std::lock_guard lock{d.mutex};
  const mr::caching_statistics& b = d.baseline;
  d.segment_peak = std::max(d.segment_peak, as_int(s.segments));
  const std::int64_t allocations = as_int(s.allocations - b.allocations);
  const std::int64_t deallocations = as_int(s.deallocations - b.deallocations);
  const std::int64_t segment_allocations = as_int(s.segment_allocations - b.segment_allocations);
  const std::int64_t segment_releases = as_int(s.segment_releases - b.segment_releases);
  const std::int64_t live = as_int(s.live_allocations);
  const std::int64_t allocated = as_int(s.allocated_bytes);
  const std::int64_t active = as_int(s.allocated_bytes + s.pending_bytes);

  DeviceStats stats;
  set_aggregate(stats.allocation, stat(live, d.peak_live.load(), allocations, deallocations));
  set_aggregate(stats.segment, stat(as_int(s.segments), d.segment_peak, segment_allocations, segment_releases));
  set_aggregate(stats.active, stat(live, d.peak_live.load(), allocations, deallocations));
  const std::int64_t block_total = as_int(s.total_allocated_bytes - b.total_allocated_bytes);
  const std::int64_t block_freed = as_int(s.total_freed_bytes - b.total_freed_bytes);
  set_aggregate(stats.allocated_bytes, stat(allocated, as_int(s.peak_allocated_bytes), block_total, block_freed));
  set_aggregate(stats.reserved_bytes, stat(as_int(s.reserved_bytes), as_int(s.peak_reserved_bytes), 0, 0));
  set_aggregate(stats.active_bytes,
                stat(active, std::max(active, as_int(s.peak_allocated_bytes)), block_total, block_freed));
  set_aggregate(stats.requested_bytes, stat(as_int(s.requested_bytes), as_int(s.peak_requested_bytes),
                                            as_int(s.total_requested_bytes - b.total_requested_bytes),
                                            as_int(s.total_requested_freed_bytes - b.total_requested_freed_bytes)));
  stats.num_alloc_retries = as_int(s.oom_retries - b.oom_retries);
  stats.num_ooms = as_int(s.ooms - b.ooms);
  stats.num_device_alloc = segment_allocations;
  stats.num_device_free = segment_releases;
  stats.num_sync_all_streams = 0;
  return stats;
}

void torch_allocator::resetAccumulatedStats(c10::DeviceIndex device) {
  per_device& d = slot(device);
  const mr::caching_statistics s = caching(device).statistics();
  std::lock_guard lock{d.mutex};
  d.baseline = s;
}

void torch_allocator::resetPeakStats(c10::DeviceIndex device) {
  per_device& d = slot(device);
  mr::caching_resource& resource = caching(device);
  resource.reset_peaks();
  d.peak_live.store(d.live.load());
  std::lock_guard lock{d.mutex};
  d.segment_peak = as_int(resource.statistics().segments);
}

void* torch_allocator::raw_alloc(std::size_t bytes) {
  const c10::DeviceIndex device = c10::cuda::current_device();
  return allocate_on(device, bytes, c10::cuda::getCurrentCUDAStream(device).stream());
}

void* torch_allocator::raw_alloc_with_stream(std::size_t bytes, cudaStream_t stream) {
  return allocate_on(c10::cuda::current_device(), bytes, stream);
}

void torch_allocator::raw_delete(void* p) { release(p); }

void torch_allocator::init(int device_count) { device_count_.store(device_count); }

double torch_allocator::getMemoryFraction(c10::DeviceIndex device) {
  per_device& d = slot(device);
  std::lock_guard lock{d.mutex};
  return d.memory_fraction;
}

void torch_allocator::setMemoryFraction(double fraction, c10::DeviceIndex device) {
  // As PyTorch's: 0 is allowed, and then every allocation fails.
  TORCH_CHECK(fraction >= 0.0 && fraction <= 1.0, "syncmem.torch: set_per_process_memory_fraction: fraction ", fraction,
              " is outside [0, 1]");
  const std::size_t total = get_memory_info(device_id::cuda(device)).total;
  caching(device).set_limit(
      fraction >= 1.0 ? std::nullopt
                      : std::optional<std::size_t>{static_cast<std::size_t>(fraction * static_cast<double>(total))});
  per_device& d = slot(device);
  std::lock_guard lock{d.mutex};
  d.memory_fraction = fraction;
}

std::vector<alloc::StreamSegmentSize> torch_allocator::getExpandableSegmentSizes(c10::DeviceIndex /*device*/) {
  not_supported("getExpandableSegmentSizes (expandable segments of CUDA graph pools)");
}

void torch_allocator::enable(bool value) { caching_enabled_.store(value); }
bool torch_allocator::isEnabled() const { return caching_enabled_.load(); }

// PyTorch's cuDNN convolutions drop every plan whose workspace is larger than
// this answer, so it is what could be allocated now, as PyTorch's allocator
// answers: the largest free block, or the device's free memory when that is
// more (up to the limit). The largest free block alone is 0 before anything
// was freed, which leaves cuDNN only the plans that need no workspace.
void torch_allocator::cacheInfo(c10::DeviceIndex device, std::size_t* largest_block) {
  mr::caching_resource& resource = caching(device);
  const mr::caching_statistics s = resource.statistics();
  std::size_t free = get_memory_info(device_id::cuda(device)).free;
  if (const auto limit = resource.limit()) free = std::min(free, *limit - std::min(*limit, s.reserved_bytes));
  *largest_block = std::max(s.largest_free_block, free);
}

// A block's place decides how CUDA IPC shares it (torch_ipc).
void* torch_allocator::getBaseAllocation(void* p, std::size_t* size) {
  const auto block = block_of(p);
  return torch_ipc::base_allocation(p, block.first, block.second, size);
}

void torch_allocator::recordStream(const c10::DataPtr& p, c10::cuda::CUDAStream stream) {
  // As PyTorch's allocator: pointers it did not hand out (empty tensors,
  // from_blob) are left alone.
  if (p.get() == nullptr || p.get_deleter() != &free_block) return;
  const c10::DeviceIndex device = p.device().index();
  const std::optional<mr::live_allocation> a = caching(device).allocation_info(p.get());
  if (!a) return;
  if (a->stream.native_handle() == stream.stream() && device == stream.device_index()) return;
  try {
    caching(device).record_stream(p.get(), cuda::make_stream_view(stream.stream(), stream.device_index()));
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "syncmem.torch: record_stream: ", e.what());
  }
}

alloc::SnapshotInfo torch_allocator::snapshot(c10::MempoolId_t mempool_id, bool include_traces) {
  alloc::SnapshotInfo info;
  // As PyTorch's: the trace is taken first, and this snapshot's own entry is
  // in the next one's.
  if (include_traces) {
    info.device_traces = history_.traces(device_count_.load());
    history_.on_snapshot();
  }
  const bool whole = mempool_id == c10::MempoolId_t{0, 0};
  if (whole) {
    for (c10::DeviceIndex device : used_devices()) append_segments(info, device, caching(device).snapshot(), history_);
    for (const auto& [device, id, snap] : mem_pools_.snapshot_all()) append_segments(info, device, snap, history_, id);
  } else if (auto pools = mem_pools_.snapshot(mempool_id)) {
    for (const auto& [device, snap] : *pools) append_segments(info, device, snap, history_, mempool_id);
  }
  // CUDA graph pools (PyTorch's private pools): in the whole snapshot and in their own.
  for (c10::DeviceIndex device : used_devices()) {
    for (const auto& [id, pool] : graph_pools_.pools(device)) {
      if (whole || id == mempool_id) append_graph_pool(info, device, id, caching(device).checkpoint(pool), history_);
    }
  }
  // The options in force: the first device's (each device's are the same
  // unless syncmem made one before enable()).
  const std::vector<c10::DeviceIndex> used = used_devices();
  const mr::caching_options options =
      used.empty() ? mr::caching_options::from_environment(default_options()) : caching(used.front()).options();
  info.config_metadata = alloc::AllocatorConfigInfo{
      .garbage_collection_threshold = 0.0,
      .max_split_size = 0,
      .pinned_num_register_threads = 0,
      .expandable_segments = options.expandable,
      .release_lock_on_malloc = false,
      .pinned_use_host_register = false,
      .graph_capture_record_stream_reuse = false,
      .last_allocator_settings = "syncmem " + options.to_string(),
      .roundup_power2_divisions = {},
  };
  return info;
}

void torch_allocator::beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                          std::function<bool(cudaStream_t)> filter) {
  (void)slot(device);  // checks the index
  TORCH_CHECK(filter, "syncmem.torch: beginAllocateToPool without a stream filter");
  if (mem_pools_.begin(device, mempool_id, filter)) return;
  history_.name_graph_pool(graph_pools_.begin(device, mempool_id, std::move(filter)), mempool_id);
}

void torch_allocator::endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  if (mem_pools_.end(device, mempool_id)) return;
  graph_pools_.end(device, mempool_id);
}

void torch_allocator::releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  if (mem_pools_.release(device, mempool_id)) return;
  graph_pools_.release(device, mempool_id);
}

int torch_allocator::getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  if (const auto uses = mem_pools_.use_count(device, mempool_id)) return *uses;
  return graph_pools_.use_count(device, mempool_id);
}

void torch_allocator::createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                         std::shared_ptr<CUDAAllocator> allocator) {
  (void)slot(device);  // checks the index
  TORCH_CHECK_NOT_IMPLEMENTED(allocator == nullptr,
                              "syncmem.torch: torch.cuda.MemPool(allocator=...) is not supported: under "
                              "syncmem.torch every pool's memory comes from syncmem's allocator (make the MemPool "
                              "without an allocator, or run without syncmem.torch.enable())");
  TORCH_CHECK(!graph_pools_.contains(device, mempool_id), "syncmem.torch: createOrIncrefPool: pool (", mempool_id.first,
              ", ", mempool_id.second, ") is a CUDA graph's pool already");
  mem_pools_.create_or_incref(device, mempool_id);
}

void torch_allocator::setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t mempool_id, bool use_on_oom) {
  mem_pools_.set_use_on_oom(device, mempool_id, use_on_oom);
}

void torch_allocator::setNoSplit(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  mem_pools_.set_no_split(device, mempool_id);
}

bool torch_allocator::checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                               const std::unordered_set<void*>& expected_live_allocations) {
  if (mem_pools_.is_mem_pool(device, mempool_id)) not_supported("checkPoolLiveAllocations of a torch.cuda.MemPool");
  return graph_pools_.live_blocks_are(caching(device), device, mempool_id, expected_live_allocations);
}

alloc::ShareableHandle torch_allocator::shareIpcHandle(void* p) {
  const auto block = block_of(p);
  auto [offset, handle] = torch_ipc::share(p, block.first, block.second);
  return {offset, std::move(handle)};
}

// The start of a segment (what getBaseAllocation gives for plain segments)
// need not start a live block: it counts as plain.
std::pair<std::size_t, bool> torch_allocator::block_of(void* p) {
  const std::size_t end = devices_used_end_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < end; ++i) {
    mr::caching_resource* const resource = devices_[i].resource.load(std::memory_order_acquire);
    if (resource == nullptr) continue;
    if (const auto a = resource->allocation_info(p)) return {a->block_bytes, a->pool == mr::segment_pool::expandable};
  }
  return {0, false};
}

std::shared_ptr<void> torch_allocator::getIpcDevPtr(std::string handle) { return ipc_.open(handle); }

bool torch_allocator::isHistoryEnabled() { return history_.enabled(); }
void torch_allocator::setUserMetadata(const std::string& metadata) { history_.set_user_metadata(metadata); }
std::string torch_allocator::getUserMetadata() { return history_.user_metadata(); }

void torch_allocator::recordHistory(bool enabled, alloc::CreateContextFn context_recorder,
                                    std::size_t alloc_trace_max_entries, alloc::RecordContext when, bool clear_history,
                                    const std::vector<std::string>& skip_actions) {
  history_.record(enabled, context_recorder, alloc_trace_max_entries, when, clear_history, skip_actions);
}

void torch_allocator::attachOutOfMemoryObserver(alloc::OutOfMemoryObserver observer) {
  std::lock_guard lock{observers_mutex_};
  oom_observers_.push_back(std::move(observer));
}

void torch_allocator::attachAllocatorTraceTracker(alloc::AllocatorTraceTracker /*tracker*/) {
  not_supported("allocator trace trackers (attachAllocatorTraceTracker)");
}

void torch_allocator::enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) {
  c10::cuda::CUDAGuard guard{dev};
  const cudaError_t rc = cudaDeviceEnablePeerAccess(dev_to_access, 0);
  if (rc == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();  // not an error: clear it
    return;
  }
  C10_CUDA_CHECK(rc);
}

cudaError_t torch_allocator::memcpyAsync(void* dst, int dst_device, const void* src, int src_device, std::size_t count,
                                         cudaStream_t stream, bool p2p_enabled) {
  if (p2p_enabled || dst_device == src_device) {
    return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
  }
  return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, count, stream);
}

std::shared_ptr<alloc::AllocatorState> torch_allocator::getCheckpointState(c10::DeviceIndex device,
                                                                           c10::MempoolId_t id) {
  (void)slot(device);  // checks the index
  if (mem_pools_.is_mem_pool(device, id)) not_supported("getCheckpointState of a torch.cuda.MemPool");
  return graph_pools_.checkpoint(caching(device), device, id);
}

alloc::CheckpointDelta torch_allocator::setCheckpointPoolState(c10::DeviceIndex device,
                                                               std::shared_ptr<alloc::AllocatorState> pps) {
  mr::caching_resource& resource = caching(device);  // checks the index
  const mr::graph_pool_restored restored = graph_pools_.restore(resource, device, pps);
  per_device& d = slot(device);
  const auto allocated = static_cast<std::int64_t>(restored.allocated.size());
  d.live.fetch_sub(static_cast<std::int64_t>(restored.freed.size()), std::memory_order_relaxed);
  raise_max(d.peak_live, d.live.fetch_add(allocated, std::memory_order_relaxed) + allocated);
  if (history_.enabled()) {
    const torch_history::context freed = history_.gather(alloc::RecordContext::ALL);
    for (const auto& b : restored.freed) {
      history_.on_free(device, b.ptr, b.allocation.block_bytes, b.allocation.stream.native_handle(), freed);
    }
    const torch_history::context allocated = history_.gather(alloc::RecordContext::STATE);
    for (const auto& b : restored.allocated) {
      history_.on_alloc(device, b.ptr, b.allocation.block_bytes, b.allocation.stream.native_handle(), allocated);
    }
  }
  alloc::CheckpointDelta delta;
  for (const auto& b : restored.freed) delta.ptrs_freed.push_back(b.ptr);
  for (const auto& b : restored.allocated) {
    delta.dataptrs_allocd.emplace_back(b.ptr, b.ptr, &free_block, c10::Device{c10::DeviceType::CUDA, device});
  }
  return delta;
}

std::string torch_allocator::name() { return "syncmem"; }

}  // namespace syncmem::interop
