#pragma once

// The virtual memory API (growable segments), a capability a backend may
// offer: see backend::virtual_memory().

#include <cstddef>

#include "backend/handles.hpp"

namespace syncmem::detail {

// Address ranges reserved without memory, and physical allocations mapped
// into them page by page (cuMemAddressReserve, cuMemCreate, cuMemMap).
class vmm_capability {
 public:
  vmm_capability() = default;
  vmm_capability(const vmm_capability&) = delete;
  vmm_capability& operator=(const vmm_capability&) = delete;
  virtual ~vmm_capability() = default;

  // The page size of the calls below; 0 when the device does not support them.
  [[nodiscard]] virtual std::size_t granularity(int index) = 0;
  [[nodiscard]] virtual void* reserve(int index, std::size_t bytes) = 0;
  virtual void free_address(int index, void* p, std::size_t bytes) noexcept = 0;
  // 0 when out of memory.
  [[nodiscard]] virtual physical_handle create(int index, std::size_t bytes) = 0;
  virtual void release(int index, physical_handle h, std::size_t bytes) noexcept = 0;
  virtual void map(int index, void* p, std::size_t bytes, physical_handle h) = 0;
  virtual void unmap(int index, void* p, std::size_t bytes) noexcept = 0;
  // Maps `count` handles of `page` bytes each, one after the other from `p`;
  // nothing stays mapped if it throws. Backends may do it in fewer calls than
  // a map per page (CUDA: one access change for the whole stretch); this one
  // maps page by page.
  virtual void map_pages(int index, void* p, std::size_t page, const physical_handle* handles, std::size_t count);
};

}  // namespace syncmem::detail
