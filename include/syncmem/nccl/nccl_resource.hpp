#pragma once

/// @file nccl/nccl_resource.hpp
/// @brief A memory resource of NCCL's own memory (ncclMemAlloc / ncclMemFree).

#include <cstddef>
#include <string>

#include "syncmem/device_id.hpp"
#include "syncmem/mr/memory_resource.hpp"

namespace syncmem::nccl {

/// @brief Device memory from ncclMemAlloc: memory NCCL can map for its
/// zero-copy and NVLink paths (cuMem-backed, with the handle types NCCL
/// needs). Use it as the upstream of a caching_resource, so that cached
/// segments are such memory, and register them (communicator::register_segments).
///
/// Follows the stream contract of mr::memory_resource. ncclMemAlloc and
/// ncclMemFree are not stream-ordered: deallocate waits for `stream` before
/// freeing. CUDA devices only. Thread-safe.
class nccl_resource final : public mr::memory_resource {
 public:
  /// @throws syncmem::logic_error for an emulated or invalid device;
  /// syncmem::unsupported_error in a build without NCCL's CUDA path
  explicit nccl_resource(device_id device);

  [[nodiscard]] std::string name() const override;

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override;
  [[nodiscard]] bool do_is_equal(const mr::memory_resource& other) const noexcept override;
};

}  // namespace syncmem::nccl
