#include "syncmem/mr/cuda_async_resource.hpp"

#include <string>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/ignored_failure.hpp"
#include "mr/device_oom.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/allocation_label.hpp"

namespace syncmem::mr {

namespace {
[[noreturn]] void refuse_pools(device_id device) {
  SYNCMEM_UNSUPPORTED(
      fmt::format("cuda_async_resource: {} has no stream-ordered memory pools "
                  "(cudaDevAttrMemoryPoolsSupported is 0)",
                  to_string(device)));
}

// The backend's pools; a backend without them refuses as a device without them does.
syncmem::detail::pool_capability& pools_of(device_id device) {
  auto* const pools = syncmem::detail::backend_for(device).pools();
  if (pools == nullptr) refuse_pools(device);
  return *pools;
}

syncmem::detail::pool_handle handle_of(void* pool) {
  return syncmem::detail::handle_of<syncmem::detail::pool_handle>(pool);
}

device_id checked_pool_device(device_id device) {
  check_device(device);
  device_guard guard{device};
  if (!pools_of(device).supported(device.index())) refuse_pools(device);
  return device;
}
}  // namespace

cuda_async_resource::cuda_async_resource(device_id device, cuda_async_options options)
    : memory_resource{memory_kind::device, checked_pool_device(device), default_alignment}, options_{options} {
  SYNCMEM_EXPECTS(options.max_pool_size != 0, "cuda_async_options::max_pool_size must be positive (nullopt: no limit)");
  device_guard guard{device};
  pool_ = syncmem::detail::pointer_of<void*>(
      pools_of(device).create(device.index(), options.release_threshold, options.max_pool_size.value_or(0)));
}

cuda_async_resource::~cuda_async_resource() {
  try {
    device_guard guard{*device()};
    pools_of(*device()).destroy(device()->index(), handle_of(pool_));
  } catch (...) {
    // the device is gone, and the pool with it
    syncmem::detail::log_ignored("destroying a CUDA memory pool");
  }
}

std::string cuda_async_resource::name() const { return fmt::format("cuda_async_resource({})", to_string(*device())); }

cuda_async_statistics cuda_async_resource::statistics() const {
  device_guard guard{*device()};
  const auto u = pools_of(*device()).usage(device()->index(), handle_of(pool_));
  return {u.reserved, u.reserved_high, u.used, u.used_high};
}

void cuda_async_resource::reset_peaks() {
  device_guard guard{*device()};
  pools_of(*device()).reset_peaks(device()->index(), handle_of(pool_));
}

void cuda_async_resource::trim(std::size_t keep_bytes) {
  device_guard guard{*device()};
  pools_of(*device()).trim(device()->index(), handle_of(pool_), keep_bytes);
}

void* cuda_async_resource::do_allocate(std::size_t bytes, stream_view stream, std::size_t) {
  const device_id d = *device();
  device_guard guard{d};
  auto& pools = pools_of(d);
  if (void* p = pools.allocate(d.index(), handle_of(pool_), bytes, stream.handle())) return p;
  oom_info info = detail::device_oom_info(d, bytes, name());
  try {
    const auto usage = pools.usage(d.index(), handle_of(pool_));
    info.reserved = usage.reserved;
    info.in_use = usage.used;
    info.limit = options_.max_pool_size;
  } catch (...) {
    // report what is known
    syncmem::detail::log_ignored("asking the pool's usage for an out-of-memory report");
  }
  SYNCMEM_OUT_OF_MEMORY(std::move(info));
}

void cuda_async_resource::do_deallocate(void* p, std::size_t, stream_view stream, std::size_t) noexcept {
  try {
    device_guard guard{*device()};
    pools_of(*device()).deallocate(device()->index(), handle_of(pool_), p, stream.handle());
  } catch (...) {
    // the device is gone
    syncmem::detail::log_ignored("freeing to a CUDA memory pool");
  }
}

}  // namespace syncmem::mr
