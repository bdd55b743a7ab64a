#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "backend/vmm_capability.hpp"
#include "backend/vmm_mappings.hpp"

namespace syncmem::detail::cuda {

// The CUDA driver's virtual memory API (cuMemAddressReserve, cuMemCreate,
// cuMemMap). Its physical allocations can be exported as POSIX file
// descriptors (for CUDA IPC of the growable range), where the device allows:
// each once, at its first share, as PyTorch's expandable segments do.
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

  // Where what is reserved and mapped, for cuda_ipc.
  [[nodiscard]] const vmm_mappings& mappings() const noexcept { return mappings_; }
  // Whether the device's physical allocations are made exportable.
  [[nodiscard]] bool exportable(int index) const noexcept;
  // The POSIX file descriptor of the physical allocation `h`
  // (cuMemExportToShareableHandle), made at its first call and kept while `h`
  // lives; closed once `h` is released and no export holds the pointer.
  // Throws where the driver refuses.
  [[nodiscard]] std::shared_ptr<const int> shareable_fd(physical_handle h);

 private:
  void forget_shareable_fd(physical_handle h) noexcept;

  vmm_mappings mappings_;
  std::mutex shareable_mutex_;
  std::unordered_map<physical_handle, std::shared_ptr<const int>> shareable_;
  // Per device: 0 not tried yet, 1 exportable, 2 the driver refused the handle type.
  std::array<std::atomic<int>, 64> exportable_{};
};

}  // namespace syncmem::detail::cuda
