#include "mr/default_host_resource.hpp"

#include "core/release_at_exit.hpp"
#include "syncmem/mr/caching_pinned_resource.hpp"
#include "syncmem/mr/pageable_resource.hpp"

namespace syncmem::mr::detail {

memory_resource& default_host_resource(memory_kind kind, device_kind backend) {
  if (kind != memory_kind::pinned_host) {
    static auto* const pageable = new pageable_resource{};
    return *pageable;
  }
  // Pinning costs milliseconds per call: cache the blocks (reused once the
  // copies that used them have completed).
  auto make = [](device_kind which) {
    auto* r = new caching_pinned_resource{which};
    syncmem::detail::release_at_exit([r] { r->trim(); });
    return r;
  };
  if (backend == device_kind::cuda) {
    static auto* const pinned = make(device_kind::cuda);
    return *pinned;
  }
  static auto* const pinned = make(device_kind::emulated);
  return *pinned;
}

}  // namespace syncmem::mr::detail
