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
#include <utility>

namespace syncmem::interop {

// Plain segments go as PyTorch's own handles do: a type byte ('c', a
// cudaMalloc allocation) and the cudaIpcMemHandle_t of the segment. A block of
// the growable range goes as 's' and a syncmem::ipc handle of the block
// (its pages exported one by one), imported once by the receiver.
class torch_ipc {
 public:
  // What CUDA IPC shares of the block at `p` of `block_bytes` (in the growable
  // range when `growable`): the block itself, or the cudaMalloc allocation
  // holding it.
  [[nodiscard]] static void* base_allocation(void* p, std::size_t block_bytes, bool growable, std::size_t* size);
  // The handle of what CUDA IPC shares of the block at `p` (as
  // base_allocation), and the offset of `p` in it: PyTorch's shareIpcHandle
  // gets a storage's pointer, which a small block's is inside its segment.
  [[nodiscard]] static std::pair<std::ptrdiff_t, std::string> share(void* p, std::size_t block_bytes, bool growable);
  // The memory a handle shares, mapped on the current device while a pointer
  // returned for it lives; a handle opened again shares the mapping.
  [[nodiscard]] std::shared_ptr<void> open(const std::string& handle);

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::weak_ptr<void>> opened_;
};

}  // namespace syncmem::interop
