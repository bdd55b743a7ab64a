#include "mr/caching/thread_caches.hpp"

#include "core/ignored_failure.hpp"
#include "mr/caching/caching_state.hpp"

namespace syncmem::mr::detail::caching {

namespace this_thread {
constinit thread_local std::uint64_t cache_id = 0;
constinit thread_local thread_cache* cache = nullptr;
constinit thread_local bool exited = false;
}  // namespace this_thread

namespace {

// Takes every block out of a cache's bins (under its lock).
void drain_locked(thread_cache& c, drained_blocks& out) {
  c.bins.drain([&out](stream_handle s, block* b) { out.emplace_back(s, b); });
  c.cached_bytes = 0;
}

// This thread's caches, one per resource it used; they go back at its exit.
struct cache_holder {
  std::vector<std::shared_ptr<thread_cache>> caches;
  cache_holder() = default;
  cache_holder(const cache_holder&) = delete;
  cache_holder& operator=(const cache_holder&) = delete;
  ~cache_holder();
};

thread_local cache_holder tls_holder;

void exit_cache(thread_cache& c) noexcept {
  drained_blocks blocks;
  std::shared_ptr<caching_state> state;
  try {
    std::lock_guard lock{c.lock};
    if (c.dead) return;
    c.dead = true;
    drain_locked(c, blocks);
    state = c.owner.lock();
  } catch (...) {
    // out of host memory at thread exit; the blocks stay lost
    syncmem::detail::log_ignored("retiring a thread's cache at thread exit");
    return;
  }
  if (state) state->retire_cache(c, blocks);
}

cache_holder::~cache_holder() {
  this_thread::exited = true;
  this_thread::cache_id = 0;
  this_thread::cache = nullptr;
  for (auto& c : caches) exit_cache(*c);
}

}  // namespace

thread_cache* thread_caches::find_or_make(caching_state& state) {
  auto& holder = tls_holder;
  thread_cache* found = nullptr;
  for (auto& c : holder.caches) {
    if (c->id == id_) {
      found = c.get();
      break;
    }
  }
  if (found == nullptr) {
    // Forget caches of resources that are gone before adding one.
    std::erase_if(holder.caches, [](const std::shared_ptr<thread_cache>& c) {
      std::lock_guard lock{c->lock};
      return c->dead;
    });
    auto c = std::make_shared<thread_cache>(state.weak_from_this(), &state, id_, budget_);
    holder.caches.push_back(c);
    try {
      std::lock_guard lock{mutex_};
      caches_.push_back(c);
    } catch (...) {
      holder.caches.pop_back();
      throw;
    }
    found = c.get();
  }
  this_thread::cache_id = id_;
  this_thread::cache = found;
  return found;
}

std::vector<std::shared_ptr<thread_cache>> thread_caches::copy() const {
  std::lock_guard lock{mutex_};
  return caches_;
}

drained_blocks thread_caches::take_all(bool wait) {
  drained_blocks drained;
  for (auto& c : copy()) {
    std::unique_lock lock{c->lock, std::defer_lock};
    if (wait) {
      lock.lock();
    } else if (!lock.try_lock()) {
      continue;  // its thread is using it: leave it
    }
    if (!c->dead) drain_locked(*c, drained);
  }
  return drained;
}

drained_blocks thread_caches::take_stream(stream_handle s) {
  drained_blocks drained;
  for (auto& c : copy()) {
    std::lock_guard lock{c->lock};
    if (c->dead) continue;
    c->bins.drain_stream(s, [&](stream_handle stream, block* b) {
      drained.emplace_back(stream, b);
      c->cached_bytes -= b->size;
    });
  }
  return drained;
}

drained_blocks thread_caches::close() {
  std::vector<std::shared_ptr<thread_cache>> caches;
  {
    std::lock_guard lock{mutex_};
    caches.swap(caches_);
  }
  drained_blocks drained;
  for (auto& c : caches) {
    std::lock_guard lock{c->lock};
    if (c->dead) continue;
    c->dead = true;
    drain_locked(*c, drained);
  }
  return drained;
}

}  // namespace syncmem::mr::detail::caching
