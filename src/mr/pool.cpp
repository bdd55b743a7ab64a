#include "syncmem/mr/pool.hpp"

#include <string>
#include <utility>

#include <fmt/format.h>

#include "mr/caching/routed_blocks.hpp"
#include "syncmem/error.hpp"

namespace syncmem::mr {

namespace {
caching_options options_for(const pool_options& o) {
  caching_options c = o.caching;
  if (o.never_split) c.max_split_size = std::size_t{1} << 20;
  if (o.limit) c.limit = o.limit;
  if (o.counts_in != nullptr) c.thread_cache_size = 0;  // every allocation counted there at once
  return c;
}

caching_resource* checked_counts_in(device_id device, caching_resource* counts_in) {
  SYNCMEM_EXPECTS(counts_in == nullptr || counts_in->device() == device,
                  fmt::format("pool({}): pool_options::counts_in is a resource of {}", to_string(device),
                              counts_in == nullptr ? std::string{} : to_string(*counts_in->device())));
  return counts_in;
}
}  // namespace

pool::pool(device_id device, pool_options options, memory_resource* upstream)
    : device_{device},
      options_{std::move(options)},
      resource_{std::make_unique<caching_resource>(device, options_for(options_), upstream)} {
  if (caching_resource* other = checked_counts_in(device, options_.counts_in)) resource_->count_in(*other);
  detail::caching::register_pool_resource(resource_.get());
}

pool::~pool() {
  detail::caching::forget_routed(resource_.get());
  detail::caching::unregister_pool_resource(resource_.get());
}

}  // namespace syncmem::mr
