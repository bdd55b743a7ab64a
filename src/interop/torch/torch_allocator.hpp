#pragma once

// syncmem's caching allocator as PyTorch's CUDA allocator: a native
// c10::cuda::CUDACachingAllocator::CUDAAllocator whose memory comes from
// mr::default_resource(device) of each CUDA device, the pool syncmem's own
// objects use. Compiled against the installed PyTorch (its headers and its
// _GLIBCXX_USE_CXX11_ABI); nothing outside src/interop/torch sees it.

#include <c10/cuda/CUDACachingAllocator.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "syncmem/graph_pool.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "torch_graph_pools.hpp"
#include "torch_history.hpp"
#include "torch_ipc.hpp"
#include "torch_mem_pools.hpp"
#include "torch_uncached.hpp"

namespace syncmem::interop {

/// @brief PyTorch's CUDA allocator on syncmem's caching_resource, one per device.
///
/// - allocate / raw_alloc: memory of mr::default_resource(current device),
///   for PyTorch's current stream of that device (or the stream given); the
///   free names that stream, as PyTorch's own allocator does.
/// - recordStream: caching_resource::record_stream, so that a block freed
///   while recorded streams still use it is reused only after their work
///   enqueued before the free has completed.
/// - getDeviceStats, resetPeakStats, resetAccumulatedStats, snapshot,
///   emptyCache, setMemoryFraction: from the caching_resource's statistics,
///   snapshot, empty_cache and limit.
/// - cacheInfo (the largest workspace cuDNN may plan for): the largest free
///   block, or the device's free memory up to the limit when that is more,
///   as PyTorch's allocator answers.
/// - beginAllocateToPool / endAllocateToPool / releasePool (torch.cuda.graph,
///   make_graphed_callables, pool sharing through graph_pool_handle): each
///   PyTorch pool id is a syncmem::graph_pool, and while a capture is open the
///   allocations on the streams it covers come from that pool (syncmem's
///   private pools, docs/graphs.md); the pool goes when its last use is
///   released and its last block is freed.
/// - What syncmem does not offer yet (torch.cuda.MemPool, IPC handles,
///   checkpointed pool state, allocation history, trace trackers, expandable
///   segment sizes, disabling the allocator) throws NotImplementedError
///   naming the feature.
///
/// The one instance is made by install() and never destroyed, and the
/// resources it uses are never destroyed either, so that tensors PyTorch
/// frees during interpreter shutdown still find them.
class torch_allocator final : public c10::cuda::CUDACachingAllocator::CUDAAllocator {
 public:
  /// @brief The base of the options of syncmem's per-device resources under
  /// PyTorch (SYNCMEM_ALLOC_CONF's keys still win): the growable range with
  /// grow_from_idle. A training step spends far less than 1% of its time
  /// allocating, and its reserve then stays within a few pages of its peak in
  /// use (docs/python.md gives the figures).
  [[nodiscard]] static mr::caching_options default_options();
  /// @brief Makes syncmem's allocator PyTorch's CUDA allocator, and
  /// default_options() the base of the per-device resources made from now
  /// on. Idempotent.
  /// @returns a warning, or "" when none: the CUDA devices whose resource
  ///   was made before (by syncmem's own objects) with other options, which
  ///   they keep
  /// @throws syncmem::logic_error when PyTorch's own allocator is already
  ///   initialized (CUDA is initialized in this process), since memory it
  ///   handed out could not be freed through this one.
  static std::string install();
  /// @brief Whether install() has made this allocator PyTorch's current one.
  [[nodiscard]] static bool installed() noexcept;

  // c10::Allocator
  c10::DataPtr allocate(std::size_t bytes) override;
  [[nodiscard]] c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // c10::DeviceAllocator
  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;

  // c10::cuda::CUDACachingAllocator::CUDAAllocator
  void* raw_alloc(std::size_t bytes) override;
  void* raw_alloc_with_stream(std::size_t bytes, cudaStream_t stream) override;
  void raw_delete(void* p) override;
  void init(int device_count) override;
  double getMemoryFraction(c10::DeviceIndex device) override;
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override;
  std::vector<c10::cuda::CUDACachingAllocator::StreamSegmentSize> getExpandableSegmentSizes(
      c10::DeviceIndex device) override;
  void enable(bool value) override;
  bool isEnabled() const override;
  void cacheInfo(c10::DeviceIndex device, std::size_t* largest_block) override;
  void* getBaseAllocation(void* p, std::size_t* size) override;
  using CUDAAllocator::recordStream;
  void recordStream(const c10::DataPtr& p, c10::cuda::CUDAStream stream) override;
  c10::cuda::CUDACachingAllocator::SnapshotInfo snapshot(c10::MempoolId_t mempool_id, bool include_traces) override;
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                           std::function<bool(cudaStream_t)> filter) override;
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                          std::shared_ptr<CUDAAllocator> allocator) override;
  void setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t mempool_id, bool use_on_oom) override;
  void setNoSplit(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                const std::unordered_set<void*>& expected_live_allocations) override;
  c10::cuda::CUDACachingAllocator::ShareableHandle shareIpcHandle(void* p) override;
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override;
  bool isHistoryEnabled() override;
  void setUserMetadata(const std::string& metadata) override;
  std::string getUserMetadata() override;
  void recordHistory(bool enabled, c10::cuda::CUDACachingAllocator::CreateContextFn context_recorder,
                     std::size_t alloc_trace_max_entries, c10::cuda::CUDACachingAllocator::RecordContext when,
                     bool clear_history, const std::vector<std::string>& skip_actions) override;
  void attachOutOfMemoryObserver(c10::cuda::CUDACachingAllocator::OutOfMemoryObserver observer) override;
  void attachAllocatorTraceTracker(c10::cuda::CUDACachingAllocator::AllocatorTraceTracker tracker) override;
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override;
  cudaError_t memcpyAsync(void* dst, int dst_device, const void* src, int src_device, std::size_t count,
                          cudaStream_t stream, bool p2p_enabled) override;
  std::shared_ptr<c10::cuda::CUDACachingAllocator::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                                                      c10::MempoolId_t id) override;
  c10::cuda::CUDACachingAllocator::CheckpointDelta setCheckpointPoolState(
      c10::DeviceIndex device, std::shared_ptr<c10::cuda::CUDACachingAllocator::AllocatorState> pps) override;
  std::string name() override;

 private:
  // A block of `bytes` (negative: freed) to torch.profiler, when it profiles memory.
  void report_to_profiler(c10::DeviceIndex device, void* p, std::int64_t bytes);
  // What syncmem's statistics do not count: the allocation count's peak.
  // PyTorch gives a deleter only the pointer: the size and stream that
  // caching_resource wants back come from its allocation_info.
  struct per_device {
    std::atomic<mr::caching_resource*> resource{nullptr};
    std::atomic<std::int64_t> live{0};
    std::atomic<std::int64_t> peak_live{0};
    std::mutex mutex;  // guards what follows
    // resetAccumulatedStats: the counters at the last reset, subtracted.
    mr::caching_statistics baseline{};
    std::int64_t segment_peak = 0;  // the most segments any getDeviceStats saw
    double memory_fraction = 1.0;
  };
  static constexpr std::size_t max_devices = 64;

  torch_allocator();
  void* allocate_on(c10::DeviceIndex device, std::size_t bytes, cudaStream_t stream);
  static void free_block(void* p);
  void release(void* p) noexcept;
  per_device& slot(c10::DeviceIndex device);
  // The size of the block at p, and whether it lies in the growable range
  // ({0, false} where no live block starts at p).
  [[nodiscard]] std::pair<std::size_t, bool> block_of(void* p);
  mr::caching_resource& caching(c10::DeviceIndex device);
  [[nodiscard]] std::vector<c10::DeviceIndex> used_devices() const;

  std::array<per_device, max_devices> devices_;
  std::atomic<std::size_t> devices_used_end_{0};  // 1 + the highest index whose resource is set
  std::atomic<int> device_count_{0};
  torch_graph_pools graph_pools_;
  std::mutex observers_mutex_;
  std::vector<c10::cuda::CUDACachingAllocator::OutOfMemoryObserver> oom_observers_;
  torch_ipc ipc_;
  torch_history history_;
  torch_mem_pools mem_pools_{[this](c10::DeviceIndex device) -> mr::caching_resource& { return caching(device); },
                             [this](c10::DeviceIndex device, c10::MempoolId_t id, mr::caching_resource& r) {
                               history_.watch_pool(device, id, r);
                             }};
  // torch.cuda.caching_allocator_enable(False): allocations then go straight
  // to cudaMalloc and back to cudaFree, outside syncmem's caches and counts.
  std::atomic<bool> caching_enabled_{true};
  torch_uncached uncached_;
};

}  // namespace syncmem::interop
