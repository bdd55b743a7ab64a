#pragma once

// Stream-ordered memory pools, a capability a backend may offer: see
// backend::pools().

#include <cstddef>

#include "backend/handles.hpp"

namespace syncmem::detail {

// What a stream-ordered memory pool holds: bytes reserved from the device and
// bytes handed out, now and at their high-water marks.
struct memory_pool_usage {
  std::size_t reserved = 0;
  std::size_t reserved_high = 0;
  std::size_t used = 0;
  std::size_t used_high = 0;
};

// Stream-ordered allocation from a pool of syncmem's own (cudaMemPoolCreate
// for CUDA), so that its settings never change the device's default pool.
// supported is false for a device that cannot (no cudaMallocAsync). A pool
// reserves at most max_size bytes from the device (0: no limit but the
// device's; cudaMemPoolProps::maxSize). allocate returns nullptr when out of
// memory. A pool is destroyed once its outstanding
// allocations have been freed (as cudaMemPoolDestroy).
class pool_capability {
 public:
  pool_capability() = default;
  pool_capability(const pool_capability&) = delete;
  pool_capability& operator=(const pool_capability&) = delete;
  virtual ~pool_capability() = default;

  [[nodiscard]] virtual bool supported(int index) = 0;
  [[nodiscard]] virtual pool_handle create(int index, std::size_t release_threshold, std::size_t max_size) = 0;
  virtual void destroy(int index, pool_handle pool) noexcept = 0;
  [[nodiscard]] virtual void* allocate(int index, pool_handle pool, std::size_t bytes, stream_handle s) = 0;
  virtual void deallocate(int index, pool_handle pool, void* p, stream_handle s) noexcept = 0;
  // Releases cached memory of the pool until it holds at most keep_bytes.
  virtual void trim(int index, pool_handle pool, std::size_t keep_bytes) = 0;
  [[nodiscard]] virtual memory_pool_usage usage(int index, pool_handle pool) = 0;
  // Resets the high-water marks of usage to the current values.
  virtual void reset_peaks(int index, pool_handle pool) = 0;
};

}  // namespace syncmem::detail
