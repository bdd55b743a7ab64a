#pragma once

// The device a CUDA stream handle belongs to (cudaStreamGetDevice), or
// nothing when CUDA cannot say (an invalid handle).

#include <cstdint>
#include <optional>

namespace syncmem::python {

[[nodiscard]] std::optional<int> cuda_stream_device(std::intptr_t handle) noexcept;

}  // namespace syncmem::python
