#pragma once

/// @file mr/cuda_resource.hpp
/// @brief Device memory straight from cudaMalloc / cudaFree.

#include "syncmem/mr/memory_resource.hpp"

namespace syncmem::mr {

/// @brief Device memory of one CUDA device from cudaMalloc, freed with cudaFree
/// (which waits for the device). The stream is not used: the memory is valid on
/// every stream. Alignment up to 256 bytes. See memory_resource for the contract.
class cuda_resource final : public memory_resource {
 public:
  /// @throws syncmem::logic_error unless `device` is a valid CUDA device
  explicit cuda_resource(device_id device);
  [[nodiscard]] std::string name() const override;

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override;
  [[nodiscard]] bool do_is_equal(const memory_resource& other) const noexcept override;
};

}  // namespace syncmem::mr
