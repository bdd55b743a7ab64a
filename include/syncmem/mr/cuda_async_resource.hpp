#pragma once

/// @file mr/cuda_async_resource.hpp
/// @brief Stream-ordered device memory from a CUDA memory pool of its own
/// (cudaMallocFromPoolAsync / cudaFreeAsync).

#include <cstddef>
#include <limits>
#include <optional>

#include "syncmem/mr/memory_resource.hpp"

namespace syncmem::mr {

/// @brief How a cuda_async_resource's pool is made.
struct cuda_async_options {
  /// @brief Bytes the pool may keep cached across stream synchronisations
  /// (cudaMemPoolAttrReleaseThreshold). The default keeps everything it has
  /// reserved, so that steady workloads stop calling into the driver.
  std::size_t release_threshold = std::numeric_limits<std::size_t>::max();
  /// @brief The most bytes the pool may reserve from the device
  /// (cudaMemPoolProps::maxSize): an allocation that would take it past them
  /// throws syncmem::out_of_memory with `limit` set. nullopt (the default):
  /// no limit but the device's memory.
  std::optional<std::size_t> max_pool_size;
};

/// @brief What the pool holds, as the driver counts it.
struct cuda_async_statistics {
  std::size_t reserved_bytes = 0;       ///< reserved from the device now
  std::size_t peak_reserved_bytes = 0;  ///< since creation or reset_peaks()
  std::size_t used_bytes = 0;           ///< handed out now
  std::size_t peak_used_bytes = 0;
};

/// @brief Device memory from a memory pool that belongs to this resource
/// (cudaMemPoolCreate; the device's default pool is left as it is), allocated
/// and freed in stream order with cudaMallocFromPoolAsync / cudaFreeAsync.
///
/// Memory freed on a stream is reused by the driver: at once on that stream,
/// and on other streams once the free is known to have completed or ordered
/// after it. See memory_resource for the stream contract.
///
/// On an emulated device the emulated backend's stream-ordered pool stands in
/// for the driver's (frees run in stream order on the stream's worker), so
/// that code using this resource runs, and is tested, without a GPU.
///
/// Alignment up to 256 bytes. Thread safety: as every resource.
class cuda_async_resource final : public memory_resource {
 public:
  /// @throws syncmem::logic_error for an invalid device or a max_pool_size of 0;
  ///   syncmem::unsupported_error when the device has no memory pools
  ///   (cudaDevAttrMemoryPoolsSupported is 0)
  explicit cuda_async_resource(device_id device, cuda_async_options options = {});
  /// @brief Destroys the pool; the driver releases its memory once every
  /// allocation from it has been freed.
  ~cuda_async_resource() override;

  [[nodiscard]] std::string name() const override;
  [[nodiscard]] const cuda_async_options& options() const noexcept { return options_; }
  /// @brief The pool's reserved and used bytes, now and at their peaks.
  [[nodiscard]] cuda_async_statistics statistics() const;
  /// @brief Resets the peaks to the current values.
  void reset_peaks();
  /// @brief Releases cached memory of the pool to the device until it
  /// reserves at most `keep_bytes` (cudaMemPoolTrimTo).
  void trim(std::size_t keep_bytes = 0);

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override;

  cuda_async_options options_;
  void* pool_ = nullptr;  // cudaMemPool_t, or the emulated pool
};

}  // namespace syncmem::mr
