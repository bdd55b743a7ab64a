#include "mr/default_host_resource.hpp"

#include <mutex>

#include "backend/per_kind.hpp"
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
  struct cache {
    std::once_flag made;
    caching_pinned_resource* resource = nullptr;
  };
  static auto* const pinned = new syncmem::detail::per_kind<cache>{};
  cache& c = (*pinned)[backend];
  std::call_once(c.made, [&] {
    c.resource = new caching_pinned_resource{backend};
    syncmem::detail::release_at_exit([r = c.resource] { r->trim(); });
  });
  return *c.resource;
}

}  // namespace syncmem::mr::detail
