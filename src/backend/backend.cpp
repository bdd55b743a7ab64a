#include "backend/backend.hpp"

#include <cstddef>

namespace syncmem::detail {

bool backend::memcpy_batch_async(void* const*, const void* const*, const std::size_t*, std::size_t, int, CUstream_st*) {
  return false;
}

bool backend::stream_capturing(int, CUstream_st*) { return false; }

void backend::vmm_map_pages(int index, void* p, std::size_t page, const physical_handle* handles, std::size_t count) {
  auto* const at = static_cast<std::byte*>(p);
  std::size_t mapped = 0;
  try {
    for (; mapped < count; ++mapped) vmm_map(index, at + mapped * page, page, handles[mapped]);
  } catch (...) {
    for (std::size_t i = 0; i < mapped; ++i) vmm_unmap(index, at + i * page, page);
    throw;
  }
}

backend& backend_for(device_kind kind) noexcept {
  return kind == device_kind::cuda ? cuda_backend() : emulated_backend();
}

}  // namespace syncmem::detail
