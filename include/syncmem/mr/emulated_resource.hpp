#pragma once

/// @file mr/emulated_resource.hpp
/// @brief Device memory of an emulated device.

#include "syncmem/mr/memory_resource.hpp"

namespace syncmem::mr {

/// @brief Device memory of one emulated device, allocated and freed like
/// cudaMalloc / cudaFree (a free waits for the device's streams). Alignment up
/// to 256 bytes. See memory_resource for the contract.
class emulated_resource final : public memory_resource {
 public:
  /// @throws syncmem::logic_error unless `device` is a valid emulated device
  explicit emulated_resource(device_id device);
  [[nodiscard]] std::string name() const override;

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override;
  [[nodiscard]] bool do_is_equal(const memory_resource& other) const noexcept override;
};

}  // namespace syncmem::mr
