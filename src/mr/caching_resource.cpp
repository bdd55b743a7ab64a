#include "syncmem/mr/caching_resource.hpp"

#include <utility>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/allocation_router.hpp"
#include "mr/caching/caching_state.hpp"
#include "mr/caching/private_pools.hpp"
#include "mr/caching/routed_blocks.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"
#include "syncmem/graph_pool.hpp"
#include "syncmem/mr/pool.hpp"

namespace syncmem::mr {

namespace {
device_id checked(device_id device, const memory_resource* upstream) {
  check_device(device);
  if (upstream != nullptr) {
    SYNCMEM_EXPECTS(upstream->kind() == memory_kind::device && upstream->device() == device,
                    fmt::format("caching_resource({}): the upstream {} is not a device resource of {}",
                                to_string(device), upstream->name(), to_string(device)));
  }
  return device;
}

// An allocation that a use_pool scope sends to `to` (after this resource, for
// a pool used on out of memory only); remembered, so that its free here goes
// back to the pool.
void* allocate_routed(pool& to, bool on_oom_only, detail::caching_state& own, std::size_t bytes, stream_view stream) {
  if (on_oom_only) {
    try {
      return own.allocate(bytes, stream);
    } catch (const out_of_memory&) {  // NOLINT(bugprone-empty-catch): the pool is the reserve for this
    }
  }
  void* p = to.resource().allocate(bytes, stream);
  try {
    detail::caching::note_routed(p, &to.resource());
  } catch (...) {
    to.resource().deallocate(p, bytes, stream);
    throw;
  }
  return p;
}
}  // namespace

caching_resource::caching_resource(device_id device, caching_options options, memory_resource* upstream)
    : memory_resource{memory_kind::device, checked(device, upstream), default_alignment},
      state_{std::make_shared<detail::caching_state>(device, std::move(options), upstream,
                                                     fmt::format("caching_resource({})", to_string(device)))} {
  state_->start();
  // A block of the cache freed on a capturing stream comes back once the
  // graphs that may use it are gone; no launch may be running by then.
  auto give_back = [state = std::weak_ptr<detail::caching_state>{state_}, device](void* p, std::size_t bytes) {
    const auto alive = state.lock();
    if (!alive) return;
    synchronize_device(device);
    alive->deallocate(p, bytes, default_stream(device));
  };
  // Its graph pools' memory counts in statistics() and against the limit, as PyTorch's private pools'.
  private_ = std::make_shared<detail::caching::private_pools>(device, upstream, name(), std::move(give_back),
                                                              std::weak_ptr<detail::caching::pool_accounts>{state_});
}

caching_resource::~caching_resource() {
  private_->detach();
  state_->detach_segment_observers();  // the state may outlive this object, its observers may not
  state_->shutdown();
  state_.reset();  // the state goes once no exiting thread holds it either
}

std::string caching_resource::name() const { return fmt::format("caching_resource({})", to_string(*device())); }
const caching_options& caching_resource::options() const noexcept { return state_->options(); }
memory_resource* caching_resource::upstream() const noexcept { return state_->upstream(); }
bool caching_resource::expandable() const noexcept { return state_->growable(); }

void caching_resource::record_stream(void* p, stream_view stream) {
  if (private_->record_stream(p, stream.handle())) return;  // a graph's block: see private_pools.hpp
  state_->record_stream(p, stream);
}

void caching_resource::release_stream(stream_view stream) {
  SYNCMEM_EXPECTS(stream.device() == *device(),
                  fmt::format("{}: release_stream with a stream of {}", name(), to_string(stream.device())));
  state_->release_stream(stream.handle());
}

void caching_resource::empty_cache() { (void)state_->trim(0); }
std::size_t caching_resource::trim(std::size_t max_cached_bytes) { return state_->trim(max_cached_bytes); }
void caching_resource::set_limit(std::optional<std::size_t> limit_bytes) { state_->set_limit(limit_bytes); }
std::optional<std::size_t> caching_resource::limit() const noexcept { return state_->limit(); }
static_assert(caching_resource::granularity == detail::caching::granule);

// As do_deallocate finds the owner: a graph pool's block, a block routed to a
// pool by use_pool, else the cache's own.
std::optional<live_allocation> caching_resource::allocation_info(const void* p) const {
  if (p == nullptr) return std::nullopt;
  if (auto info = private_->info(p)) return info;
  if (detail::caching::routed_blocks.load(std::memory_order_acquire) > 0) {
    // (A pool is of one device, and only that device's resources route to it.)
    if (const caching_resource* owner = detail::caching::routed_owner(p);
        owner != nullptr && owner != this && owner->device() == device()) {
      return owner->allocation_info(p);
    }
  }
  return state_->allocation_info(p);
}

graph_pool_checkpoint caching_resource::checkpoint(const graph_pool& pool) const {
  return private_->checkpoint(pool.id());
}

graph_pool_restored caching_resource::restore(const graph_pool_checkpoint& checkpoint) {
  return private_->restore(checkpoint);
}

void caching_resource::count_in(const caching_resource& other) { state_->count_in(other.state_); }

caching_statistics caching_resource::statistics() const { return state_->statistics(); }
void caching_resource::reset_peaks() { state_->reset_peaks(); }
allocator_snapshot caching_resource::snapshot() const { return state_->snapshot(); }

void caching_resource::add_segment_observer(std::shared_ptr<segment_observer> observer) {
  SYNCMEM_EXPECTS(observer != nullptr, fmt::format("{}: add_segment_observer with a null observer", name()));
  state_->add_segment_observer(observer);
  try {
    private_->observe(observer);
  } catch (...) {
    (void)state_->remove_segment_observer(observer.get());
    throw;
  }
}

bool caching_resource::remove_segment_observer(const segment_observer* observer) noexcept {
  const bool was_there = state_->remove_segment_observer(observer);
  return private_->stop_observing(observer) || was_there;
}

void* caching_resource::do_allocate(std::size_t bytes, stream_view stream, std::size_t) {
  if (syncmem::detail::routes_open()) {
    if (auto route = syncmem::detail::find_route(stream)) {
      if (route->capture) return private_->allocate(bytes, stream, *route->capture);
      // A pool's own resource is never routed (its pool's allocations reach it so).
      if (!detail::caching::is_pool_resource(this)) {
        return allocate_routed(*route->pool, route->on_oom_only, *state_, bytes, stream);
      }
    }
  }
  return state_->allocate(bytes, stream);
}

void caching_resource::do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t) noexcept {
  if (private_->may_take() && private_->deallocate(p, bytes, stream)) return;
  if (detail::caching::routed_blocks.load(std::memory_order_acquire) > 0) {
    if (caching_resource* owner = detail::caching::take_routed(p); owner != nullptr && owner != this) {
      owner->deallocate(p, bytes, stream);
      return;
    }
  }
  state_->deallocate(p, bytes, stream);
}

}  // namespace syncmem::mr
