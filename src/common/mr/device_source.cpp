#include "device_source.hpp"

#include <string>

#include "../backend.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/allocation_label.hpp"

namespace syncmem::mr::detail {

void* allocate_from_device(device_id device, std::size_t bytes, std::string_view resource) {
  device_guard guard{device};
  auto& backend = syncmem::detail::backend_for(device);
  if (void* p = backend.allocate(device.index(), bytes)) return p;
  oom_info info;
  info.requested = bytes;
  info.device = device;
  info.label = std::string{current_allocation_label()};
  info.resource = std::string{resource};
  try {
    const auto memory = backend.memory(device.index());
    info.device_free = memory.free;
    info.device_total = memory.total;
  } catch (...) {  // NOLINT(bugprone-empty-catch): report what is known
  }
  throw out_of_memory{std::move(info)};
}

void deallocate_to_device(device_id device, void* p, std::size_t bytes) noexcept {
  try {
    device_guard guard{device};
    syncmem::detail::backend_for(device).deallocate(device.index(), p, bytes);
  } catch (...) {  // NOLINT(bugprone-empty-catch): the device is gone
  }
}

}  // namespace syncmem::mr::detail
