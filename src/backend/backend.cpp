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
  static_assert(device_kind_count == 2, "a new device kind needs its backend here");
  static constexpr per_kind<backend& (*)() noexcept> table{{{&cuda_backend, &emulated_backend}}};
  return table[kind]();
}

std::optional<pointer_owner> find_pointer_owner(const void* p) {
  for (const bool local : {true, false}) {
    for (const device_kind kind : device_kinds) {
      backend& b = backend_for(kind);
      if (b.traits().pointer_info_is_local != local) continue;
      if (!local && b.device_count() == 0) continue;
      if (auto info = b.pointer_info(p)) return pointer_owner{kind, *info};
    }
  }
  return std::nullopt;
}

bool known_locally(const void* p) {
  for (const device_kind kind : device_kinds) {
    backend& b = backend_for(kind);
    if (b.traits().pointer_info_is_local && b.pointer_info(p)) return true;
  }
  return false;
}

}  // namespace syncmem::detail
