#pragma once

// The out-of-memory report that the device sources share.

#include <cstddef>
#include <string>

#include "syncmem/device_id.hpp"
#include "syncmem/error.hpp"

namespace syncmem::mr::detail {

// What is known when `resource` could not get `bytes` bytes of `device`: the
// request, the allocation label in force, and the device's free and total
// memory when the backend can tell.
[[nodiscard]] oom_info device_oom_info(device_id device, std::size_t bytes, std::string resource);

}  // namespace syncmem::mr::detail
