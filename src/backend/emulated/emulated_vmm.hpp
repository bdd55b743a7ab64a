#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/vmm_capability.hpp"
#include "backend/vmm_mappings.hpp"

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

  // The physical allocations mapped over [p, p + bytes), in address order,
  // for sharing them with another process (emulated_ipc); throws
  // syncmem::logic_error where part of the range is not mapped.
  struct mapped_piece {
    std::uintptr_t address;
    std::size_t size;
    int fd;
    std::uint64_t inode;
    std::uint64_t device;
  };
  [[nodiscard]] std::vector<mapped_piece> pieces(const void* p, std::size_t bytes);
  // Whether p lies in an address range reserve() made.
  [[nodiscard]] bool reserved(const void* p) const { return mappings_.in_reserved(p); }

 private:
  struct physical_block {
    int fd;
    int device;
    std::size_t size;
    bool fresh;
    std::uint64_t inode = 0;
    std::uint64_t file_device = 0;
  };

  emulated_backend& backend_;
  std::mutex physical_mutex_;
  std::unordered_map<physical_handle, physical_block> physical_;
  vmm_mappings mappings_;
  physical_handle next_handle_ = 1;
};

}  // namespace syncmem::detail::emulated
