#include "backend/backend.hpp"

#include <cstddef>

#include <fmt/format.h>

#include "syncmem/error.hpp"

namespace syncmem::detail {

bool backend::memcpy_batch_async(void* const*, const void* const*, const std::size_t*, std::size_t, int,
                                 stream_handle) {
  return false;
}

bool backend::copy_kernel_batch(void* const*, const void* const*, const std::size_t*, std::size_t, int, stream_handle) {
  return false;
}

bool backend::pageable_uploads_read_at_return(int) { return false; }

graph_capability& require_graphs(backend& b, const char* operation) {
  graph_capability* const graphs = b.graphs();
  if (graphs == nullptr) {
    SYNCMEM_UNSUPPORTED(fmt::format("{}: this backend cannot capture streams into graphs", operation));
  }
  return *graphs;
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
