#include "mr/caching/private_pools.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/capture_registry.hpp"
#include "core/ignored_failure.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"

namespace syncmem::mr::detail::caching {

namespace {

// An ordinary block freed on a capturing stream, held by the capture's
// graph_pool: the graph may read or write it at every launch.
struct held_block {
  std::weak_ptr<private_pools> pools;
  void* p;
  std::size_t bytes;
  // A constructor, not aggregate init: make_shared cannot aggregate-initialise before clang 16.
  held_block(std::weak_ptr<private_pools> owner, void* block, std::size_t size)
      : pools{std::move(owner)}, p{block}, bytes{size} {}
  held_block(const held_block&) = delete;
  held_block& operator=(const held_block&) = delete;
  ~held_block() {
    if (auto alive = pools.lock()) alive->give_back(p, bytes);
  }
};

// A stream may allocate to a pool without capturing (PyTorch's graph-tree
// warm-up, beginAllocateCurrentStreamToPool): no graph records what it frees.
bool recording(stream_view s) {
  device_guard guard{s.device()};
  return syncmem::detail::backend_for(s.device()).stream_capturing(s.device().index(), s.handle());
}

}  // namespace

// ---- private_pools ---------------------------------------------------------------------------------

private_pools::private_pools(device_id device, memory_resource* upstream, std::string name, release_fn release,
                             std::weak_ptr<pool_accounts> accounts)
    : device_{device},
      upstream_{upstream},
      name_{std::move(name)},
      release_{std::move(release)},
      accounts_{std::move(accounts)} {}

void* private_pools::allocate(std::size_t bytes, stream_view s, const syncmem::detail::capture_info& capture) {
  std::shared_ptr<private_pool> pool;
  {
    std::lock_guard lock{mutex_};
    if (auto it = by_pool_.find(capture.pool->id); it != by_pool_.end()) pool = it->second.lock();
    if (!pool) {
      std::erase_if(by_pool_, [](const auto& entry) { return entry.second.expired(); });
      pool = std::make_shared<private_pool>(device_, upstream_, *capture.pool, name_, accounts_, observers_);
      capture.pool->hold(pool);
      by_pool_[capture.pool->id] = pool;
    }
  }
  void* p = pool->allocate(bytes, s.handle(), capture.number);
  try {
    std::lock_guard lock{mutex_};
    live_.emplace(p, pool);
    live_count_.fetch_add(1);
  } catch (...) {
    pool->deallocate(p, s.handle(), capture.number);
    throw;
  }
  return p;
}

bool private_pools::deallocate(void* p, std::size_t bytes, stream_view s) noexcept {
  try {
    if (live_count_.load() > 0) {
      std::shared_ptr<private_pool> pool;
      {
        std::lock_guard lock{mutex_};
        if (const auto it = live_.find(p); it != live_.end()) {
          pool = std::move(it->second);
          live_.erase(it);
          live_count_.fetch_sub(1);
        }
      }
      if (pool) {
        const auto capture = syncmem::detail::capture_on(s);
        pool->deallocate(p, s.handle(), capture ? capture->number : 0);
        // Freed while a capture into another pool runs (PyTorch's graph reset
        // and recapture): that graph may use the block at every launch, so its
        // pool keeps this one, as it keeps ordinary blocks freed in it.
        if (capture && capture->pool->id != pool->pool_id() && recording(s)) capture->pool->hold(pool);
        // The pool goes here if its graphs are gone, or once no capture runs.
        syncmem::detail::release_after_captures(std::move(pool));
        return true;
      }
    }
    if (const auto capture = syncmem::detail::capture_on(s); capture && recording(s)) {
      capture->pool->hold(std::make_shared<held_block>(weak_from_this(), p, bytes));
      return true;
    }
  } catch (...) {
    // no memory to hold it: the cache takes it as usual
    syncmem::detail::log_ignored("holding a freed block for a capture");
  }
  return false;
}

bool private_pools::record_stream(void* p, stream_handle s) {
  if (live_count_.load(std::memory_order_acquire) == 0) return false;
  std::shared_ptr<private_pool> pool;
  {
    std::lock_guard lock{mutex_};
    const auto it = live_.find(p);
    if (it == live_.end()) return false;
    pool = it->second;
  }
  pool->used_on(p, s);
  return true;
}

std::optional<live_allocation> private_pools::info(const void* p) {
  if (live_count_.load(std::memory_order_acquire) == 0) return std::nullopt;
  std::shared_ptr<private_pool> pool;
  {
    std::lock_guard lock{mutex_};
    const auto it = live_.find(const_cast<void*>(p));  // NOLINT(cppcoreguidelines-pro-type-const-cast): a key only
    if (it == live_.end()) return std::nullopt;
    pool = it->second;
  }
  return pool->info(p);
}

graph_pool_checkpoint private_pools::checkpoint(std::uint64_t pool_id) {
  std::shared_ptr<private_pool> pool;
  {
    std::lock_guard lock{mutex_};
    if (const auto it = by_pool_.find(pool_id); it != by_pool_.end()) pool = it->second.lock();
  }
  if (!pool) {
    graph_pool_checkpoint none;
    none.pool_id = pool_id;
    return none;
  }
  return pool->checkpoint();
}

graph_pool_restored private_pools::restore(const graph_pool_checkpoint& c) {
  // Held throughout, so that live_ changes with the pool's blocks (the pool's
  // lock is only ever taken inside this one).
  std::lock_guard lock{mutex_};
  std::shared_ptr<private_pool> pool;
  if (const auto it = by_pool_.find(c.pool_id); it != by_pool_.end()) pool = it->second.lock();
  if (!pool) {
    SYNCMEM_EXPECTS(c.live.empty(), fmt::format("{}: restore: graph_pool {} holds no memory here any more (it went, "
                                                "or the checkpoint is of another resource)",
                                                name_, c.pool_id));
    return {};
  }
  graph_pool_restored r = pool->restore(c);
  for (const graph_pool_block& x : r.freed) {
    if (live_.erase(x.ptr) != 0) live_count_.fetch_sub(1);
  }
  for (const graph_pool_block& x : r.allocated) {
    if (live_.emplace(x.ptr, pool).second) live_count_.fetch_add(1);
  }
  return r;
}

void private_pools::observe(const std::shared_ptr<segment_observer>& observer) {
  std::vector<std::shared_ptr<private_pool>> pools;  // let go after the lock: a pool's last owner frees its memory
  std::lock_guard lock{mutex_};                      // no pool is made meanwhile
  for (const auto& [id, weak] : by_pool_) {
    if (auto pool = weak.lock()) pools.push_back(std::move(pool));
  }
  // Only this function holds more than one pool's lock, and one call at a time.
  std::vector<std::unique_lock<std::mutex>> held;
  held.reserve(pools.size());
  for (const auto& pool : pools) held.push_back(pool->hold());
  for (const auto& pool : pools) pool->report_to(*observer);
  observers_->add(observer);
}

void private_pools::detach() noexcept {
  std::lock_guard lock{mutex_};
  release_ = nullptr;
  observers_->clear();
}

void private_pools::give_back(void* p, std::size_t bytes) noexcept {
  release_fn release;
  {
    std::lock_guard lock{mutex_};
    release = release_;
  }
  if (!release) return;
  try {
    release(p, bytes);
  } catch (...) {
    // frees do not throw; nothing more to do
    syncmem::detail::log_ignored("releasing a block held by a graph");
  }
}

}  // namespace syncmem::mr::detail::caching
