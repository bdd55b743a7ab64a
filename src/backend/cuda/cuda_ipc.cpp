#include "backend/cuda/cuda_ipc.hpp"

#include <cuda_runtime_api.h>

#include <cstring>

#include <fmt/format.h>

#include "backend/cuda/cuda_handles.hpp"
#include "backend/cuda/driver_api.hpp"
#include "core/log.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail::cuda {

static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof(ipc_bytes));
static_assert(sizeof(cudaIpcEventHandle_t) <= sizeof(ipc_bytes));

ipc_export cuda_ipc::export_memory(int index, const void* p, std::size_t) {
  const auto& api = driver();
  SYNCMEM_EXPECTS(api.loaded, "ipc export: the CUDA driver lacks the calls syncmem needs");
  CUdeviceptr base = 0;
  std::size_t size = 0;
  const auto address = reinterpret_cast<CUdeviceptr>(p);
  cudaIpcMemHandle_t handle{};
  cudaError_t status = cudaErrorInvalidValue;
  if (api.pointer_get_attribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, address) == CUDA_SUCCESS &&
      api.pointer_get_attribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, address) == CUDA_SUCCESS) {
    status = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base));  // NOLINT(performance-no-int-to-ptr)
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    SYNCMEM_FAIL(
        fmt::format("ipc export: CUDA cannot share the allocation holding {} on cuda:{} ({}): CUDA IPC "
                    "shares memory of cudaMalloc (the caching resource's plain segments), not of the "
                    "growable range or of cudaMallocAsync pools",
                    p, index, cudaGetErrorString(status)));
  }
  ipc_export result{reinterpret_cast<void*>(base), size, {}};  // NOLINT(performance-no-int-to-ptr)
  std::memcpy(result.memory.data(), &handle, sizeof handle);
  return result;
}

void* cuda_ipc::open_memory(int index, const ipc_bytes& memory, std::span<const std::byte>, std::size_t,
                            pid_t exporter) {
  cudaIpcMemHandle_t handle{};
  std::memcpy(&handle, memory.data(), sizeof handle);
  void* p = nullptr;
  const cudaError_t status = cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    SYNCMEM_FAIL(
        fmt::format("ipc import: cannot open the memory process {} shared on cuda:{} ({}); the exporter "
                    "may have exited or freed it",
                    exporter, index, cudaGetErrorString(status)));
  }
  return p;
}

void cuda_ipc::close_memory(int, void* base, std::size_t) noexcept {
  const cudaError_t status = cudaIpcCloseMemHandle(base);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    logger().warn("cudaIpcCloseMemHandle({}) failed: {}", base, cudaGetErrorString(status));
  }
}

event_handle cuda_ipc::record_signal(int, stream_handle s, std::shared_ptr<ipc_shared_word>, ipc_bytes& event) {
  cudaEvent_t e = nullptr;
  SYNCMEM_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventInterprocess));
  try {
    SYNCMEM_CUDA_TRY(cudaEventRecord(e, native(s)));
    cudaIpcEventHandle_t handle{};
    SYNCMEM_CUDA_TRY(cudaIpcGetEventHandle(&handle, e));
    std::memcpy(event.data(), &handle, sizeof handle);
  } catch (...) {
    (void)cudaEventDestroy(e);
    throw;
  }
  return handle_of(e);
}

void cuda_ipc::release_signal(int, event_handle e) noexcept { (void)cudaEventDestroy(native(e)); }

void cuda_ipc::wait_signal(int, stream_handle s, const ipc_bytes& event, std::shared_ptr<ipc_shared_word>, pid_t) {
  cudaIpcEventHandle_t handle{};
  std::memcpy(&handle, event.data(), sizeof handle);
  cudaEvent_t e = nullptr;
  SYNCMEM_CUDA_TRY(cudaIpcOpenEventHandle(&e, handle));
  const cudaError_t status = cudaStreamWaitEvent(native(s), e, 0);
  (void)cudaEventDestroy(e);  // the wait holds what it needs
  SYNCMEM_CUDA_TRY(status);
}

}  // namespace syncmem::detail::cuda
