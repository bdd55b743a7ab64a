#pragma once

/// @file mr/device_resource.hpp
/// @brief Device memory straight from the device's backend: cudaMalloc /
/// cudaFree on a CUDA device, their emulated counterparts on an emulated one.

#include <string_view>

#include "syncmem/mr/memory_resource.hpp"

namespace syncmem::mr {

/// @brief Device memory of one device, allocated and freed like cudaMalloc /
/// cudaFree (a free waits for the device). The stream is not used: the memory
/// is valid on every stream. Alignment up to 256 bytes. See memory_resource
/// for the contract.
class device_resource : public memory_resource {
 public:
  /// @throws syncmem::logic_error unless `device` is a valid device
  explicit device_resource(device_id device);
  /// @brief "device_resource(cuda:0)", or the name of the kind-checked class
  /// made (cuda_resource, emulated_resource).
  [[nodiscard]] std::string name() const override;

 protected:
  /// @brief For cuda_resource and emulated_resource: `device` must be of `kind`.
  device_resource(device_id device, device_kind kind, std::string_view class_name);

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override;
  [[nodiscard]] bool do_is_equal(const memory_resource& other) const noexcept override;

  std::string_view class_name_ = "device_resource";
};

/// @brief A device_resource that accepts CUDA devices only (cudaMalloc / cudaFree).
class cuda_resource final : public device_resource {
 public:
  /// @throws syncmem::logic_error unless `device` is a valid CUDA device
  explicit cuda_resource(device_id device) : device_resource{device, device_kind::cuda, "cuda_resource"} {}
};

/// @brief A device_resource that accepts emulated devices only.
class emulated_resource final : public device_resource {
 public:
  /// @throws syncmem::logic_error unless `device` is a valid emulated device
  explicit emulated_resource(device_id device) : device_resource{device, device_kind::emulated, "emulated_resource"} {}
};

}  // namespace syncmem::mr
