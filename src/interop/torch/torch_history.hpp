#pragma once

// Memory history for syncmem.torch (torch.cuda.memory._record_memory_history):
// every allocation and free, with the context PyTorch's recorder captures
// (Python and C++ stacks), kept in a ring of the last entries per device, and
// the context of each live block, for torch.cuda.memory._snapshot() and
// memory_viz. Recorded only while enabled: otherwise one relaxed load per call.

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/ApproximateClock.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace syncmem::interop {

class torch_history {
 public:
  using trace_entry = c10::CachingDeviceAllocator::TraceEntry;
  using context = std::shared_ptr<c10::GatheredContext>;

  void record(bool enabled, c10::CachingDeviceAllocator::CreateContextFn recorder, std::size_t max_entries,
              c10::CachingDeviceAllocator::RecordContext when, bool clear, const std::vector<std::string>& skip);
  [[nodiscard]] bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }

  void on_alloc(c10::DeviceIndex device, const void* p, std::size_t size, void* stream);
  void on_free(c10::DeviceIndex device, const void* p, std::size_t size, void* stream);
  // addr_ of an OOM entry is the device's free memory, as PyTorch's.
  void on_oom(c10::DeviceIndex device, std::size_t size, std::size_t device_free, void* stream);
  void on_snapshot();

  // The traces, one per device of `device_count`, with unix times (the
  // snapshot's device_traces); the context each live block was allocated in.
  [[nodiscard]] std::vector<std::vector<trace_entry>> traces(int device_count);
  [[nodiscard]] context context_of(std::uintptr_t address);

 private:
  void add(c10::DeviceIndex device, trace_entry::Action action, std::size_t addr, std::size_t size, void* stream,
           context ctx);

  std::atomic<bool> enabled_{false};
  mutable std::mutex mutex_;
  c10::CachingDeviceAllocator::CreateContextFn recorder_ = nullptr;
  c10::CachingDeviceAllocator::RecordContext when_ = c10::CachingDeviceAllocator::RecordContext::NEVER;
  std::size_t max_entries_ = 1;
  std::vector<bool> skip_;                       // by trace_entry::Action
  std::vector<std::deque<trace_entry>> traces_;  // by device
  std::unordered_map<std::uintptr_t, context> live_;
  c10::ApproximateClockToUnixTimeConverter clock_;
};

}  // namespace syncmem::interop
