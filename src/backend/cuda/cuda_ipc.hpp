#pragma once

#include "backend/ipc_capability.hpp"

namespace syncmem::detail::cuda {

// CUDA IPC: cudaIpcGetMemHandle / cudaIpcOpenMemHandle for memory of
// cudaMalloc (the caching resource's plain segments), and an interprocess
// event (cudaIpcGetEventHandle) recorded after the exporter's writes.
class cuda_ipc final : public ipc_capability {
 public:
  [[nodiscard]] ipc_export export_memory(int index, const void* p, std::size_t bytes) override;
  [[nodiscard]] void* open_memory(int index, const ipc_bytes& memory, std::span<const std::byte> extra,
                                  std::size_t size, pid_t exporter) override;
  void close_memory(int index, void* base, std::size_t size) noexcept override;
  [[nodiscard]] event_handle record_signal(int index, stream_handle s, std::shared_ptr<ipc_shared_word> word,
                                           ipc_bytes& event) override;
  void release_signal(int index, event_handle e) noexcept override;
  void wait_signal(int index, stream_handle s, const ipc_bytes& event, std::shared_ptr<ipc_shared_word> word,
                   pid_t exporter) override;
};

}  // namespace syncmem::detail::cuda
