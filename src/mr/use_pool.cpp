#include "syncmem/mr/use_pool.hpp"

#include "core/allocation_router.hpp"
#include "core/log.hpp"

namespace syncmem::mr {

use_pool::use_pool(pool& p)
    : pool_{&p}, route_{syncmem::detail::add_thread_route(p.device(), &p, p.options().use_on_oom_only)} {}

use_pool::~use_pool() {
  if (!syncmem::detail::remove_thread_route(route_)) {
    syncmem::detail::logger().error(
        "mr::use_pool: a scope of a pool of {} ended before a scope made after it on the same thread; scopes must "
        "end in reverse order",
        to_string(pool_->device()));
  }
}

pool* use_pool::current(device_id device) noexcept { return syncmem::detail::thread_route(device); }

}  // namespace syncmem::mr
