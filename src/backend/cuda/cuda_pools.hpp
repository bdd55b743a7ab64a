#pragma once

#include "backend/pool_capability.hpp"

namespace syncmem::detail::cuda {

// Stream-ordered pools of the CUDA runtime (cudaMemPoolCreate, cudaMallocFromPoolAsync).
class cuda_pools final : public pool_capability {
 public:
  [[nodiscard]] bool supported(int index) override;
  [[nodiscard]] pool_handle create(int index, std::size_t release_threshold, std::size_t max_size) override;
  void destroy(int index, pool_handle pool) noexcept override;
  [[nodiscard]] void* allocate(int index, pool_handle pool, std::size_t bytes, stream_handle s) override;
  void deallocate(int index, pool_handle pool, void* p, stream_handle s) noexcept override;
  void trim(int index, pool_handle pool, std::size_t keep_bytes) override;
  [[nodiscard]] memory_pool_usage usage(int index, pool_handle pool) override;
  void reset_peaks(int index, pool_handle pool) override;
};

}  // namespace syncmem::detail::cuda
