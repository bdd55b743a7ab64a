// The device a CUDA stream handle belongs to, so that a stream of another
// device given from Python is refused by name rather than used.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "stream_device.hpp"

namespace syncmem::python {

std::optional<int> cuda_stream_device(std::intptr_t handle) noexcept {
  int device = -1;
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the handle comes from Python as an int
  if (cudaStreamGetDevice(reinterpret_cast<cudaStream_t>(handle), &device) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it so that later calls do not see it
    return std::nullopt;
  }
  return device;
}

}  // namespace syncmem::python
