#pragma once

/// @file cuda/interop.hpp
/// @brief Conversions between syncmem's streams and events and the CUDA
/// runtime's handles. The only public place, with cuda/*.hpp, where CUDA
/// types appear.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "syncmem/device.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::cuda {

/// @brief The cudaStream_t that the handle of a CUDA device's stream holds.
[[nodiscard]] inline cudaStream_t native(stream_handle s) noexcept {
  return reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(s));  // NOLINT(performance-no-int-to-ptr)
}
/// @brief The cudaEvent_t that the handle of a CUDA device's event holds.
[[nodiscard]] inline cudaEvent_t native(event_handle e) noexcept {
  return reinterpret_cast<cudaEvent_t>(static_cast<std::uintptr_t>(e));  // NOLINT(performance-no-int-to-ptr)
}
/// @brief The handle of a CUDA stream, as stream_view holds it.
[[nodiscard]] inline stream_handle handle_of(cudaStream_t s) noexcept {
  return stream_handle{reinterpret_cast<std::uintptr_t>(s)};
}
/// @brief The handle of a CUDA event.
[[nodiscard]] inline event_handle handle_of(cudaEvent_t e) noexcept {
  return event_handle{reinterpret_cast<std::uintptr_t>(e)};
}

/// @brief A view of an existing CUDA stream of CUDA device `device` (the
/// stream must belong to it; 0 is that device's legacy default stream).
[[nodiscard]] inline stream_view make_stream_view(cudaStream_t s, int device) {
  check_device(device_id::cuda(device));
  return detail::stream_access::make(device_id::cuda(device), handle_of(s));
}

/// @brief A view of an existing CUDA stream of the current CUDA device.
[[nodiscard]] inline stream_view make_stream_view(cudaStream_t s) {
  int device = 0;
  SYNCMEM_CUDA_TRY(cudaGetDevice(&device));
  return make_stream_view(s, device);
}

/// @brief The cudaStream_t of a view of a CUDA stream.
/// @throws syncmem::logic_error for a stream of an emulated device.
[[nodiscard]] inline cudaStream_t native(stream_view s) {
  SYNCMEM_EXPECTS(s.device().kind() == device_kind::cuda,
                  "syncmem::cuda::native: the stream belongs to " + to_string(s.device()) + ", not a CUDA device");
  return s.native_handle();
}

/// @brief The cudaEvent_t of an event of a CUDA device.
[[nodiscard]] inline cudaEvent_t native(const event& e) {
  SYNCMEM_EXPECTS(e.device().kind() == device_kind::cuda,
                  "syncmem::cuda::native: the event belongs to " + to_string(e.device()) + ", not a CUDA device");
  return e.native_handle();
}

}  // namespace syncmem::cuda
