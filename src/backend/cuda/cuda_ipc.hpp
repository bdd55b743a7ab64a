#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/ipc_capability.hpp"

namespace syncmem::detail::cuda {

class cuda_vmm;

// CUDA IPC: cudaIpcGetMemHandle / cudaIpcOpenMemHandle for memory of
// cudaMalloc (the caching resource's plain segments); for the growable range,
// each page's POSIX file descriptor (cuMemExportToShareableHandle at the
// page's first share, kept by cuda_vmm), which the importer takes with
// pidfd_getfd and maps side by side as the exporter has them; and an
// interprocess event (cudaIpcGetEventHandle) recorded after the exporter's
// writes.
class cuda_ipc final : public ipc_capability {
 public:
  explicit cuda_ipc(cuda_vmm& vmm) noexcept : vmm_{vmm} {}

  [[nodiscard]] ipc_export export_memory(int index, const void* p, std::size_t bytes) override;
  [[nodiscard]] void* open_memory(int index, const ipc_bytes& memory, std::span<const std::byte> extra,
                                  std::size_t size, pid_t exporter) override;
  void close_memory(int index, void* base, std::size_t size) noexcept override;
  [[nodiscard]] event_handle record_signal(int index, stream_handle s, std::shared_ptr<ipc_shared_word> word,
                                           ipc_bytes& event) override;
  void release_signal(int index, event_handle e) noexcept override;
  void wait_signal(int index, stream_handle s, const ipc_bytes& event, std::shared_ptr<ipc_shared_word> word,
                   pid_t exporter) override;

 private:
  [[nodiscard]] ipc_export export_pages(int index, const void* p, std::size_t bytes);
  [[nodiscard]] void* open_pages(int index, std::span<const std::byte> extra, std::size_t count, std::size_t size,
                                 pid_t exporter);

  struct imported_pages {
    std::size_t size;
    std::vector<unsigned long long> handles;
  };
  cuda_vmm& vmm_;
  std::mutex mutex_;
  std::unordered_map<std::uintptr_t, imported_pages> imported_;  // by the base of their range
};

}  // namespace syncmem::detail::cuda
