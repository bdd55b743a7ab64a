#pragma once

#include "backend/vmm_capability.hpp"

namespace syncmem::detail::cuda {

// The CUDA driver's virtual memory API (cuMemAddressReserve, cuMemCreate, cuMemMap).
class cuda_vmm final : public vmm_capability {
 public:
  [[nodiscard]] std::size_t granularity(int index) override;
  [[nodiscard]] void* reserve(int index, std::size_t bytes) override;
  void free_address(int index, void* p, std::size_t bytes) noexcept override;
  [[nodiscard]] physical_handle create(int index, std::size_t bytes) override;
  void release(int index, physical_handle h, std::size_t bytes) noexcept override;
  void map(int index, void* p, std::size_t bytes, physical_handle h) override;
  void unmap(int index, void* p, std::size_t bytes) noexcept override;
  void map_pages(int index, void* p, std::size_t page, const physical_handle* handles, std::size_t count) override;
};

}  // namespace syncmem::detail::cuda
