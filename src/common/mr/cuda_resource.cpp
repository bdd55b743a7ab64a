#include "syncmem/mr/cuda_resource.hpp"

#include <fmt/format.h>

#include "device_source.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"

namespace syncmem::mr {

namespace {
device_id checked_cuda(device_id device) {
  SYNCMEM_EXPECTS(device.kind() == device_kind::cuda,
                  fmt::format("cuda_resource needs a CUDA device, not {}", to_string(device)));
  check_device(device);
  return device;
}
}  // namespace

cuda_resource::cuda_resource(device_id device)
    : memory_resource{memory_kind::device, checked_cuda(device), default_alignment} {}

std::string cuda_resource::name() const { return fmt::format("cuda_resource({})", to_string(*device())); }

void* cuda_resource::do_allocate(std::size_t bytes, stream_view, std::size_t) {
  return detail::allocate_from_device(*device(), bytes, name());
}

void cuda_resource::do_deallocate(void* p, std::size_t bytes, stream_view, std::size_t) noexcept {
  detail::deallocate_to_device(*device(), p, bytes);
}

bool cuda_resource::do_is_equal(const memory_resource& other) const noexcept {
  const auto* o = dynamic_cast<const cuda_resource*>(&other);
  return o != nullptr && o->device() == device();
}

}  // namespace syncmem::mr
