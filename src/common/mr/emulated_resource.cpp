#include "syncmem/mr/emulated_resource.hpp"

#include <fmt/format.h>

#include "device_source.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"

namespace syncmem::mr {

namespace {
device_id checked_emulated(device_id device) {
  SYNCMEM_EXPECTS(device.kind() == device_kind::emulated,
                  fmt::format("emulated_resource needs an emulated device, not {}", to_string(device)));
  check_device(device);
  return device;
}
}  // namespace

emulated_resource::emulated_resource(device_id device)
    : memory_resource{memory_kind::device, checked_emulated(device), default_alignment} {}

std::string emulated_resource::name() const { return fmt::format("emulated_resource({})", to_string(*device())); }

void* emulated_resource::do_allocate(std::size_t bytes, stream_view, std::size_t) {
  return detail::allocate_from_device(*device(), bytes, name());
}

void emulated_resource::do_deallocate(void* p, std::size_t bytes, stream_view, std::size_t) noexcept {
  detail::deallocate_to_device(*device(), p, bytes);
}

bool emulated_resource::do_is_equal(const memory_resource& other) const noexcept {
  const auto* o = dynamic_cast<const emulated_resource*>(&other);
  return o != nullptr && o->device() == device();
}

}  // namespace syncmem::mr
