#include "syncmem/mr/pool.hpp"

#include <utility>

#include "mr/caching/routed_blocks.hpp"

namespace syncmem::mr {

namespace {
caching_options options_for(const pool_options& o) {
  caching_options c = o.caching;
  if (o.never_split) c.max_split_size = std::size_t{1} << 20;
  if (o.limit) c.limit = o.limit;
  return c;
}
}  // namespace

pool::pool(device_id device, pool_options options, memory_resource* upstream)
    : device_{device},
      options_{std::move(options)},
      resource_{std::make_unique<caching_resource>(device, options_for(options_), upstream)} {
  detail::caching::register_pool_resource(resource_.get());
}

pool::~pool() {
  detail::caching::forget_routed(resource_.get());
  detail::caching::unregister_pool_resource(resource_.get());
}

}  // namespace syncmem::mr
