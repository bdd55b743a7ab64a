#include "syncmem/mr/use_pool.hpp"

#include "mr/caching/scoped_pools.hpp"

namespace syncmem::mr {

use_pool::use_pool(pool& p) : pool_{&p} { detail::caching::push_scope(pool_); }

use_pool::~use_pool() { detail::caching::pop_scope(pool_); }

pool* use_pool::current(device_id device) noexcept { return detail::caching::scoped_pool(device); }

}  // namespace syncmem::mr
