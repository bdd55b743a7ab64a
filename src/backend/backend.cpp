#include "backend/backend.hpp"

#include <cstddef>

#include <fmt/format.h>

#include "syncmem/error.hpp"

namespace syncmem::detail {

bool backend::memcpy_batch_async(void* const*, const void* const*, const std::size_t*, std::size_t, int, CUstream_st*) {
  return false;
}

bool backend::copy_kernel_batch(void* const*, const void* const*, const std::size_t*, std::size_t, int, CUstream_st*) {
  return false;
}

bool backend::stream_capturing(int, CUstream_st*) { return false; }
bool backend::pageable_uploads_read_at_return(int) { return false; }

namespace {
[[noreturn]] void refuse_capture(const char* operation) {
  SYNCMEM_UNSUPPORTED(fmt::format("{}: this backend cannot capture streams into graphs", operation));
}
}  // namespace

void backend::begin_capture(int, CUstream_st*) { refuse_capture("begin_capture"); }
void* backend::end_capture(int, CUstream_st*) { refuse_capture("end_capture"); }
void backend::launch_graph(int, void*, CUstream_st*) { refuse_capture("launch_graph"); }
void backend::destroy_graph(int, void*) noexcept {}
void backend::capture_host_func(int, CUstream_st*, host_func, void*, host_func) { refuse_capture("capture_host_func"); }
unsigned long long backend::capture_sequence(int, CUstream_st*) { return 0; }

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
