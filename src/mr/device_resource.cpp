#include "syncmem/mr/device_resource.hpp"

#include <string>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/ignored_failure.hpp"
#include "mr/device_oom.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/allocation_label.hpp"

namespace syncmem::mr {

oom_info detail::device_oom_info(device_id device, std::size_t bytes, std::string resource) {
  oom_info info;
  info.requested = bytes;
  info.device = device;
  info.label = std::string{current_allocation_label()};
  info.resource = std::move(resource);
  try {
    const auto memory = syncmem::detail::backend_for(device).memory(device.index());
    info.device_free = memory.free;
    info.device_total = memory.total;
  } catch (...) {
    // report what is known
    syncmem::detail::log_ignored("asking the device's memory for an out-of-memory report");
  }
  return info;
}

namespace {
device_id checked(device_id device, device_kind kind, std::string_view class_name) {
  SYNCMEM_EXPECTS(device.kind() == kind, fmt::format("{} needs {} device, not {}", class_name,
                                                     syncmem::detail::names_of(kind).a_device, to_string(device)));
  check_device(device);
  return device;
}
}  // namespace

device_resource::device_resource(device_id device) : device_resource{device, device.kind(), "device_resource"} {}

device_resource::device_resource(device_id device, device_kind kind, std::string_view class_name)
    : memory_resource{memory_kind::device, checked(device, kind, class_name), default_alignment},
      class_name_{class_name} {}

std::string device_resource::name() const { return fmt::format("{}({})", class_name_, to_string(*device())); }

void* device_resource::do_allocate(std::size_t bytes, stream_view, std::size_t) {
  const device_id d = *device();
  device_guard guard{d};
  auto& backend = syncmem::detail::backend_for(d);
  if (void* p = backend.allocate(d.index(), bytes)) return p;
  SYNCMEM_OUT_OF_MEMORY(detail::device_oom_info(d, bytes, name()));
}

void device_resource::do_deallocate(void* p, std::size_t bytes, stream_view, std::size_t) noexcept {
  try {
    device_guard guard{*device()};
    syncmem::detail::backend_for(*device()).deallocate(device()->index(), p, bytes);
  } catch (...) {
    // the device is gone
    syncmem::detail::log_ignored("freeing device memory");
  }
}

bool device_resource::do_is_equal(const memory_resource& other) const noexcept {
  const auto* o = dynamic_cast<const device_resource*>(&other);
  return o != nullptr && o->device() == device();
}

}  // namespace syncmem::mr
