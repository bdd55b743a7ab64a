#include "backend/cuda/cuda_pools.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_handles.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail::cuda {
namespace {
cudaMemPool_t native(pool_handle pool) noexcept { return pointer_of<cudaMemPool_t>(pool); }
}  // namespace

bool cuda_pools::supported(int index) {
  int supported = 0;
  SYNCMEM_CUDA_TRY(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, index));
  return supported != 0;
}

pool_handle cuda_pools::create(int index, std::size_t release_threshold, std::size_t max_size) {
  cudaMemPoolProps props{};
  props.maxSize = max_size;
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = index;
  cudaMemPool_t pool = nullptr;
  SYNCMEM_CUDA_TRY(cudaMemPoolCreate(&pool, &props));
  cuuint64_t threshold = release_threshold;
  const cudaError_t status = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  if (status != cudaSuccess) {
    (void)cudaMemPoolDestroy(pool);
    SYNCMEM_CUDA_TRY(status);
  }
  return detail::handle_of<pool_handle>(pool);
}

void cuda_pools::destroy(int, pool_handle pool) noexcept {
  SYNCMEM_CUDA_CHECK_NOEXCEPT(cudaMemPoolDestroy(native(pool)));
}

void* cuda_pools::allocate(int, pool_handle pool, std::size_t bytes, stream_handle s) {
  void* p = nullptr;
  const cudaError_t status = cudaMallocFromPoolAsync(&p, bytes, native(pool), native(s));
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  SYNCMEM_CUDA_TRY(status);
  return p;
}

void cuda_pools::deallocate(int, pool_handle, void* p, stream_handle s) noexcept {
  SYNCMEM_CUDA_CHECK_NOEXCEPT(cudaFreeAsync(p, native(s)));
}

void cuda_pools::trim(int, pool_handle pool, std::size_t keep_bytes) {
  SYNCMEM_CUDA_TRY(cudaMemPoolTrimTo(native(pool), keep_bytes));
}

memory_pool_usage cuda_pools::usage(int, pool_handle pool) {
  cudaMemPool_t p = native(pool);
  auto read = [p](cudaMemPoolAttr attr) {
    cuuint64_t value = 0;
    SYNCMEM_CUDA_TRY(cudaMemPoolGetAttribute(p, attr, &value));
    return static_cast<std::size_t>(value);
  };
  memory_pool_usage u;
  u.reserved = read(cudaMemPoolAttrReservedMemCurrent);
  u.reserved_high = read(cudaMemPoolAttrReservedMemHigh);
  u.used = read(cudaMemPoolAttrUsedMemCurrent);
  u.used_high = read(cudaMemPoolAttrUsedMemHigh);
  return u;
}

void cuda_pools::reset_peaks(int, pool_handle pool) {
  cudaMemPool_t p = native(pool);
  cuuint64_t zero = 0;  // the only value these attributes accept: resets to the current value
  SYNCMEM_CUDA_TRY(cudaMemPoolSetAttribute(p, cudaMemPoolAttrReservedMemHigh, &zero));
  SYNCMEM_CUDA_TRY(cudaMemPoolSetAttribute(p, cudaMemPoolAttrUsedMemHigh, &zero));
}

}  // namespace syncmem::detail::cuda
