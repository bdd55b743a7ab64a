#pragma once

// CUDA IPC for syncmem.torch: what PyTorch's torch.multiprocessing asks of its
// allocator to send a CUDA tensor to another process (getBaseAllocation,
// shareIpcHandle) and to open one there (getIpcDevPtr). PyTorch itself keeps
// the sender's storage alive, and orders the receiver after the sender's
// writes with an event of its own.

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace syncmem::interop {

class torch_ipc {
 public:
  // The cudaMalloc allocation holding `p` (CUDA IPC shares whole allocations).
  [[nodiscard]] static void* base_allocation(void* p, std::size_t* size);
  // The handle of the allocation at `base`: a type byte ('c', a cudaMalloc
  // allocation, as PyTorch writes it) and the cudaIpcMemHandle_t.
  [[nodiscard]] static std::string share(void* base);
  // The memory a handle shares, mapped on the current device while a pointer
  // returned for it lives; a handle opened again shares the mapping.
  [[nodiscard]] std::shared_ptr<void> open(const std::string& handle);

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::weak_ptr<void>> opened_;
};

}  // namespace syncmem::interop
