#include "torch_uncached.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

namespace syncmem::interop {

void* torch_uncached::allocate(c10::DeviceIndex device, std::size_t bytes) {
  const c10::cuda::CUDAGuard guard{device};
  void* p = nullptr;
  const cudaError_t rc = cudaMalloc(&p, bytes);
  if (rc == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // reported by the caller, as out of memory
    return nullptr;
  }
  C10_CUDA_CHECK(rc);
  const std::lock_guard lock{mutex_};
  devices_.emplace(p, device);
  count_.fetch_add(1);
  return p;
}

bool torch_uncached::release(void* p) noexcept {
  if (count_.load() == 0) return false;
  c10::DeviceIndex device = 0;
  {
    const std::lock_guard lock{mutex_};
    const auto it = devices_.find(p);
    if (it == devices_.end()) return false;
    device = it->second;
    devices_.erase(it);
    count_.fetch_sub(1);
  }
  try {
    const c10::cuda::CUDAGuard guard{device};
    if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();  // a free cannot report: the device is gone
  } catch (...) {  // NOLINT(bugprone-empty-catch): the device is gone, and its memory with it
  }
  return true;
}

}  // namespace syncmem::interop
