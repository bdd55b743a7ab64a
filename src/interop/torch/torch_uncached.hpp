#pragma once

// The allocations syncmem.torch makes while PyTorch has turned its caching
// off (torch.cuda.caching_allocator_enable(False)): straight from cudaMalloc,
// back to cudaFree, outside syncmem's caches and statistics, as PyTorch's.

#include <c10/core/Device.h>

#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>

namespace syncmem::interop {

class torch_uncached {
 public:
  // cudaMalloc on `device`; nullptr when the device is out of memory.
  [[nodiscard]] void* allocate(c10::DeviceIndex device, std::size_t bytes);
  // cudaFree of `p` if it came from allocate; false otherwise.
  bool release(void* p) noexcept;

 private:
  std::mutex mutex_;
  std::map<void*, c10::DeviceIndex> devices_;  // of each live allocation
  std::atomic<std::size_t> count_{0};          // devices_.size(), read without the lock
};

}  // namespace syncmem::interop
