#include "default_host_resource.hpp"

#include "syncmem/mr/pageable_resource.hpp"
#include "syncmem/mr/pinned_resource.hpp"

namespace syncmem::mr::detail {

memory_resource& default_host_resource(memory_kind kind, device_kind backend) {
  if (kind != memory_kind::pinned_host) {
    static auto* const pageable = new pageable_resource{};
    return *pageable;
  }
  if (backend == device_kind::cuda) {
    static auto* const pinned = new pinned_resource{device_kind::cuda};
    return *pinned;
  }
  static auto* const pinned = new pinned_resource{device_kind::emulated};
  return *pinned;
}

}  // namespace syncmem::mr::detail
