#include "syncmem/mr/pinned_resource.hpp"

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/allocation_label.hpp"

namespace syncmem::mr {

namespace {
device_kind checked_backend(device_kind backend) {
  if (device_count(backend) == 0) {
    SYNCMEM_UNSUPPORTED(fmt::format("pinned_resource: no {} devices to pin host memory for ({})", to_string(backend),
                                    why_no_devices(backend)));
  }
  return backend;
}

unsigned to_flags(pinned_flags f) {
  unsigned flags = 0;
  if (f.portable) flags |= syncmem::detail::host_alloc_portable;
  if (f.mapped) flags |= syncmem::detail::host_alloc_mapped;
  if (f.write_combined) flags |= syncmem::detail::host_alloc_write_combined;
  return flags;
}
}  // namespace

pinned_resource::pinned_resource(device_kind backend, pinned_flags flags)
    : memory_resource{memory_kind::pinned_host, std::nullopt, 4096},
      flags_{flags},
      backend_{checked_backend(backend)} {}

std::string pinned_resource::name() const { return fmt::format("pinned_resource({})", to_string(backend_)); }

void* pinned_resource::do_allocate(std::size_t bytes, stream_view, std::size_t) {
  if (void* p = syncmem::detail::backend_for(backend_).allocate_pinned(bytes, to_flags(flags_))) return p;
  oom_info info;
  info.requested = bytes;
  info.label = std::string{current_allocation_label()};
  info.resource = name();
  info.hint = "pinning host memory failed: the page-locked memory limit (ulimit -l) or host memory is exhausted";
  SYNCMEM_OUT_OF_MEMORY(std::move(info));
}

void pinned_resource::do_deallocate(void* p, std::size_t bytes, stream_view, std::size_t) noexcept {
  syncmem::detail::backend_for(backend_).deallocate_pinned(p, bytes);
}

bool pinned_resource::do_is_equal(const memory_resource& other) const noexcept {
  const auto* o = dynamic_cast<const pinned_resource*>(&other);
  return o != nullptr && o->backend_ == backend_;
}

}  // namespace syncmem::mr
