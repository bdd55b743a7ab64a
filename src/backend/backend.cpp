#include "backend/backend.hpp"

namespace syncmem::detail {

bool backend::memcpy_batch_async(void* const*, const void* const*, const std::size_t*, std::size_t, int, CUstream_st*) {
  return false;
}

bool backend::copy_kernel_batch(void* const*, const void* const*, const std::size_t*, std::size_t, int, CUstream_st*) {
  return false;
}

bool backend::stream_capturing(int, CUstream_st*) { return false; }

backend& backend_for(device_kind kind) noexcept {
  return kind == device_kind::cuda ? cuda_backend() : emulated_backend();
}

}  // namespace syncmem::detail
