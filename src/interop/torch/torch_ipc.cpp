#include "torch_ipc.hpp"

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <exception>
#include <optional>
#include <span>

#include "backend/backend.hpp"
#include "syncmem/cuda/interop.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/ipc.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::interop {
namespace {

constexpr char cuda_malloc_handle = 'c';  // PyTorch's SHAREABLE_CUDA_MALLOC
constexpr char syncmem_handle = 's';      // a syncmem::ipc::memory_handle

detail::ipc_capability& cuda_ipc() {
  detail::ipc_capability* c = detail::backend_for(device_kind::cuda).ipc();
  TORCH_CHECK(c != nullptr, "syncmem.torch: this build of syncmem cannot share CUDA memory between processes");
  return *c;
}

// The export of the allocation holding `p`, as a c10::Error with syncmem's
// reason when CUDA cannot share it (memory of the growable range).
detail::ipc_export export_of(const void* p) {
  const std::optional<device_id> owner = get_pointer_attributes(p).device;
  TORCH_CHECK(owner && owner->kind() == device_kind::cuda, "syncmem.torch: ", p, " is not CUDA device memory");
  const device_id device = *owner;
  try {
    device_guard guard{device};
    return cuda_ipc().export_memory(device.index(), p, 1);
  } catch (const std::exception& e) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "syncmem.torch: sharing a CUDA tensor between processes: ", e.what(),
                                " (set SYNCMEM_ALLOC_CONF=expandable:0 for memory CUDA IPC can share)");
  }
}

}  // namespace

void* torch_ipc::base_allocation(void* p, std::size_t block_bytes, bool growable, std::size_t* size) {
  if (growable) {
    if (size != nullptr) *size = block_bytes;
    return p;
  }
  const detail::ipc_export e = export_of(p);
  if (size != nullptr) *size = e.size;
  return e.base;
}

std::pair<std::ptrdiff_t, std::string> torch_ipc::share(void* p, std::size_t block_bytes, bool growable) {
  if (growable) {
    const device_id device = device_id::cuda(c10::cuda::current_device());
    ipc::memory_handle h;
    try {
      const stream_view s =
          syncmem::cuda::make_stream_view(c10::cuda::getCurrentCUDAStream(device.index()).stream(), device.index());
      // PyTorch holds the storage until the receiver lets go: the export holds nothing more.
      h = ipc::export_memory(p, block_bytes, s, nullptr);
    } catch (const std::exception& e) {
      TORCH_CHECK_NOT_IMPLEMENTED(false, "syncmem.torch: sharing a CUDA tensor between processes: ", e.what(),
                                  " (set SYNCMEM_ALLOC_CONF=expandable:0 to share plain segments instead)");
    }
    std::string handle(1 + h.bytes().size(), syncmem_handle);
    std::memcpy(handle.data() + 1, h.bytes().data(), h.bytes().size());
    return {0, std::move(handle)};
  }
  const detail::ipc_export e = export_of(p);
  std::string handle(1 + e.memory.size(), cuda_malloc_handle);
  std::memcpy(handle.data() + 1, e.memory.data(), e.memory.size());
  return {static_cast<const std::byte*>(p) - static_cast<const std::byte*>(e.base), std::move(handle)};
}

std::shared_ptr<void> torch_ipc::open(const std::string& handle) {
  if (!handle.empty() && handle[0] == syncmem_handle) {
    std::shared_ptr<ipc::imported_memory> memory;
    try {
      const auto h = ipc::memory_handle::from_bytes(
          std::span{reinterpret_cast<const std::byte*>(handle.data()) + 1, handle.size() - 1});
      const stream_view s = syncmem::cuda::make_stream_view(
          c10::cuda::getCurrentCUDAStream(h.device().index()).stream(), h.device().index());
      memory = std::make_shared<ipc::imported_memory>(ipc::import_memory(h, s));
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "syncmem.torch: getIpcDevPtr: ", e.what());
    }
    return {memory->data(), [memory](void*) mutable { memory.reset(); }};
  }
  detail::ipc_bytes bytes{};
  TORCH_CHECK(handle.size() == 1 + bytes.size() && handle[0] == cuda_malloc_handle,
              "syncmem.torch: getIpcDevPtr: not a handle of a cudaMalloc allocation shared by syncmem.torch (",
              handle.size(), " bytes)");
  std::lock_guard lock{mutex_};
  if (auto it = opened_.find(handle); it != opened_.end()) {
    if (auto alive = it->second.lock()) return alive;
  }
  std::memcpy(bytes.data(), handle.data() + 1, bytes.size());
  const device_id device = device_id::cuda(c10::cuda::current_device());
  void* p = nullptr;
  try {
    device_guard guard{device};
    p = cuda_ipc().open_memory(device.index(), bytes, {}, 0, 0);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "syncmem.torch: getIpcDevPtr: ", e.what());
  }
  std::shared_ptr<void> mapped{p, [device](void* q) {
                                 try {
                                   device_guard guard{device};
                                   cuda_ipc().close_memory(device.index(), q, 0);
                                 } catch (...) {  // NOLINT(bugprone-empty-catch): a deleter must not throw
                                 }
                               }};
  opened_[handle] = mapped;
  return mapped;
}

}  // namespace syncmem::interop
