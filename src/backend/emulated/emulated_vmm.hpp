#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>

#include "backend/vmm_capability.hpp"

namespace syncmem::detail::emulated {

class emulated_backend;

// The virtual memory API on emulated devices: address ranges reserved with
// mmap, physical allocations as memfd files mapped into them.
class emulated_vmm final : public vmm_capability {
 public:
  explicit emulated_vmm(emulated_backend& backend) noexcept : backend_{backend} {}

  [[nodiscard]] std::size_t granularity(int index) override;
  [[nodiscard]] void* reserve(int index, std::size_t bytes) override;
  void free_address(int index, void* p, std::size_t bytes) noexcept override;
  [[nodiscard]] physical_handle create(int index, std::size_t bytes) override;
  void release(int index, physical_handle h, std::size_t bytes) noexcept override;
  void map(int index, void* p, std::size_t bytes, physical_handle h) override;
  void unmap(int index, void* p, std::size_t bytes) noexcept override;

 private:
  struct physical_block {
    int fd;
    int device;
    std::size_t size;
    bool fresh;
  };

  emulated_backend& backend_;
  std::mutex physical_mutex_;
  std::unordered_map<physical_handle, physical_block> physical_;
  physical_handle next_handle_ = 1;
};

}  // namespace syncmem::detail::emulated
