#pragma once

// What cuda_resource and emulated_resource share: device memory straight from
// the device's backend, and the out-of-memory error it gives.

#include <cstddef>
#include <string_view>

#include "syncmem/device_id.hpp"

namespace syncmem::mr::detail {

[[nodiscard]] void* allocate_from_device(device_id device, std::size_t bytes, std::string_view resource);
void deallocate_to_device(device_id device, void* p, std::size_t bytes) noexcept;

}  // namespace syncmem::mr::detail
