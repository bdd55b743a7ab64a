#pragma once

// Memory history for syncmem.torch (torch.cuda.memory._record_memory_history):
// every allocation and free, with the context PyTorch's recorder captures
// (Python and C++ stacks), and each segment obtained or given back and each
// stretch of the growable range mapped or unmapped (as PyTorch's expandable
// segments), those of MemPools and graph pools marked with the pool's id,
// kept in a ring of the last entries per device, and the context of each live
// block, for torch.cuda.memory._snapshot() and memory_viz. Recorded only
// while enabled: otherwise one relaxed load per call.

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/ApproximateClock.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace syncmem::mr {
class caching_resource;
}

namespace syncmem::interop {

class torch_history {
 public:
  using trace_entry = c10::CachingDeviceAllocator::TraceEntry;
  using context = std::shared_ptr<c10::GatheredContext>;

  void record(bool enabled, c10::CachingDeviceAllocator::CreateContextFn recorder, std::size_t max_entries,
              c10::CachingDeviceAllocator::RecordContext when, bool clear, const std::vector<std::string>& skip);
  [[nodiscard]] bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }

  // The stack PyTorch's recorder gives when `level` is recorded (STATE for an
  // allocation, ALL for a free or an empty_cache), else null. It takes the
  // GIL: called before the allocator's locks.
  [[nodiscard]] context gather(c10::CachingDeviceAllocator::RecordContext level);
  // While one lives, the segment events of this thread carry `ctx`, the stack
  // of the allocation or empty_cache that caused them, as PyTorch's do.
  class segment_cause {
   public:
    explicit segment_cause(context ctx);
    ~segment_cause();
    segment_cause(const segment_cause&) = delete;
    segment_cause& operator=(const segment_cause&) = delete;

   private:
    context previous_;
  };

  // `ctx`: what gather gave for the call.
  void on_alloc(c10::DeviceIndex device, const void* p, std::size_t size, void* stream, context ctx);
  void on_free(c10::DeviceIndex device, const void* p, std::size_t size, void* stream, context ctx);
  // torch.cuda.memory._set_memory_metadata: carried by every entry from now on.
  void set_user_metadata(const std::string& metadata);
  [[nodiscard]] std::string user_metadata() const;
  // addr_ of an OOM entry is the device's free memory, as PyTorch's.
  void on_oom(c10::DeviceIndex device, std::size_t size, std::size_t device_free, void* stream);
  void on_snapshot();
  // Records the segments of `resource`, the caching resource of `device`, from
  // now on; once per device (later calls do nothing).
  void watch(c10::DeviceIndex device, mr::caching_resource& resource);
  // Records the segments of the resource of a MemPool's pool, marked with its
  // id, from now on (until the pool goes, its segments recorded freed then).
  void watch_pool(c10::DeviceIndex device, c10::MempoolId_t pool, mr::caching_resource& resource);
  // A segment event (SEGMENT_ALLOC, _FREE, _MAP, _UNMAP), with the stack of
  // this thread's segment_cause (the resource tells of its segments under its
  // lock, where Python's stack cannot be read).
  void on_segment(c10::DeviceIndex device, trace_entry::Action action, const void* at, std::size_t bytes,
                  c10::MempoolId_t pool = {0, 0});
  // syncmem's graph pool `pool` is PyTorch's pool `id` (beginAllocateToPool).
  void name_graph_pool(std::uint64_t pool, c10::MempoolId_t id);
  // A segment event of syncmem's graph pool `pool`, marked with PyTorch's id of it.
  void on_graph_segment(c10::DeviceIndex device, trace_entry::Action action, const void* at, std::size_t bytes,
                        std::uint64_t pool);

  // The traces, one per device of `device_count`, with unix times (the
  // snapshot's device_traces); the context each live block was allocated in.
  [[nodiscard]] std::vector<std::vector<trace_entry>> traces(int device_count);
  [[nodiscard]] context context_of(std::uintptr_t address);

 private:
  void add(c10::DeviceIndex device, trace_entry::Action action, std::size_t addr, std::size_t size, void* stream,
           context ctx, c10::MempoolId_t pool = {0, 0});

  std::atomic<bool> enabled_{false};
  mutable std::mutex mutex_;
  c10::CachingDeviceAllocator::CreateContextFn recorder_ = nullptr;
  c10::CachingDeviceAllocator::RecordContext when_ = c10::CachingDeviceAllocator::RecordContext::NEVER;
  std::size_t max_entries_ = 1;
  std::string user_metadata_;
  std::vector<bool> skip_;                       // by trace_entry::Action
  std::vector<std::deque<trace_entry>> traces_;  // by device
  std::unordered_map<std::uintptr_t, context> live_;
  std::unordered_map<std::uint64_t, c10::MempoolId_t> graph_pools_;  // PyTorch's ids of syncmem's graph pools
  c10::ApproximateClockToUnixTimeConverter clock_;
  std::array<std::atomic<bool>, 64> watched_{};  // by device index
};

}  // namespace syncmem::interop
