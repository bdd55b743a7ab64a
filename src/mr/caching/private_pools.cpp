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

constexpr std::size_t block_rounding = 512;

std::size_t rounded(std::size_t bytes) {
  return (std::max<std::size_t>(bytes, 1) + block_rounding - 1) / block_rounding * block_rounding;
}

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

}  // namespace

// ---- private_pool ----------------------------------------------------------------------------------

private_pool::private_pool(device_id device, memory_resource* upstream, const syncmem::detail::graph_pool_state& owner,
                           std::string name)
    : device_{device}, upstream_{upstream}, pool_id_{owner.id}, usage_{owner.usage}, name_{std::move(name)} {}

private_pool::~private_pool() {
  try {
    device_guard guard{device_};
    auto& backend = syncmem::detail::backend_for(device_);
    // cudaFree waits for the device itself; an emulated free does not.
    if (!backend.traits().deallocate_waits_for_device) backend.synchronize_device(device_.index());
    for (const auto& [p, b] : blocks_) {
      if (upstream_ != nullptr) {
        upstream_->deallocate(p, b.size, default_stream(device_));
      } else {
        backend.deallocate(device_.index(), p, b.size);
      }
      usage_->reserved.fetch_sub(b.size);
    }
  } catch (...) {
    // the device is gone, and its memory with it
    syncmem::detail::log_ignored("freeing a private pool's memory");
  }
}

void* private_pool::allocate(std::size_t bytes, stream_handle s, std::uint64_t capture) {
  const std::size_t size = rounded(bytes);
  std::lock_guard lock{mutex_};
  // The smallest reusable free block that wastes at most half of itself.
  auto best = blocks_.end();
  for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
    const block& b = it->second;
    if (!b.free || b.size < size || b.size > 2 * size) continue;
    if (b.freed_in == capture && b.freed_on != s && !b.freed_after) continue;  // nothing proves it idle
    if (best != blocks_.end() && b.size >= best->second.size) continue;
    if (b.freed_in == capture && b.freed_on != s && !follows(s, *b.freed_after)) continue;
    best = it;
  }
  if (best != blocks_.end()) {
    best->second.free = false;
    best->second.freed_after.reset();
    best->second.allocated_in = capture;
    best->second.requested = bytes;
    best->second.stream = s;
    usage_->allocated.fetch_add(best->second.size);
    return best->first;
  }
  device_guard guard{device_};
  void* p = nullptr;
  if (upstream_ != nullptr) {
    p = upstream_->allocate(size, default_stream(device_));
  } else {
    // The CUDA backend allocates in the relaxed capture mode: legal while this thread captures.
    p = syncmem::detail::backend_for(device_).allocate(device_.index(), size);
  }
  if (p == nullptr) {
    oom_info info;
    info.requested = bytes;
    info.device = device_;
    info.resource = name_;
    info.reserved = usage_->reserved.load();
    info.in_use = usage_->allocated.load();
    info.hint = fmt::format(
        "the allocation was made during a capture, from graph_pool {}; graphs that are no longer "
        "needed release their pools' memory when destroyed",
        pool_id_);
    SYNCMEM_OUT_OF_MEMORY(std::move(info));
  }
  blocks_.emplace(p, block{size, bytes, s, false, capture, 0, stream_handle{}});
  usage_->reserved.fetch_add(size);
  usage_->allocated.fetch_add(size);
  return p;
}

void private_pool::deallocate(void* p, stream_handle s, std::uint64_t capture) noexcept {
  std::lock_guard lock{mutex_};
  const auto it = blocks_.find(p);
  if (it == blocks_.end() || it->second.free) return;
  it->second.free = true;
  // Reusable at once by the capture that allocated it only where that capture
  // freed it, on the stream that will allocate; by any later capture always.
  block& b = it->second;
  b.freed_in = b.allocated_in;
  const bool same_capture = capture != 0 && capture == b.allocated_in;
  b.freed_on = same_capture && b.used_by.empty() ? s : stream_handle{};
  b.freed_after.reset();
  if (same_capture) {
    try {
      b.freed_after = reached_by(s, b.used_by);
    } catch (...) {
      syncmem::detail::log_ignored("reading a capture's graph");  // not reused in this capture
    }
  }
  b.used_by.clear();
  usage_->allocated.fetch_sub(b.size);
}

void private_pool::used_on(void* p, stream_handle s) {
  std::lock_guard lock{mutex_};
  const auto it = blocks_.find(p);
  if (it == blocks_.end() || it->second.free || it->second.stream == s) return;
  auto& users = it->second.used_by;
  if (std::find(users.begin(), users.end(), s) == users.end()) users.push_back(s);
}

std::optional<std::vector<syncmem::detail::capture_node>> private_pool::reached_by(
    stream_handle freeing, const std::vector<stream_handle>& users) {
  syncmem::detail::graph_capability* const graphs = syncmem::detail::backend_for(device_).graphs();
  if (graphs == nullptr) return std::nullopt;
  auto nodes = graphs->capture_frontier(device_.index(), freeing);
  for (const stream_handle user : users) {
    if (!nodes) return std::nullopt;
    // A stream outside the capture orders nothing in its graph.
    const auto more = graphs->capture_frontier(device_.index(), user);
    if (!more) return std::nullopt;
    nodes->insert(nodes->end(), more->begin(), more->end());
  }
  return nodes;
}

bool private_pool::follows(stream_handle s, const std::vector<syncmem::detail::capture_node>& nodes) {
  if (nodes.empty()) return true;
  syncmem::detail::graph_capability* const graphs = syncmem::detail::backend_for(device_).graphs();
  try {
    return graphs != nullptr && graphs->capture_follows(device_.index(), s, nodes);
  } catch (...) {
    syncmem::detail::log_ignored("reading a capture's graph");
    return false;
  }
}

std::optional<live_allocation> private_pool::info(const void* p) {
  std::lock_guard lock{mutex_};
  const auto it = blocks_.find(const_cast<void*>(p));  // NOLINT(cppcoreguidelines-pro-type-const-cast): a key only
  if (it == blocks_.end() || it->second.free) return std::nullopt;
  return live_allocation{it->second.requested, it->second.size,
                         syncmem::detail::stream_access::make(device_, it->second.stream), segment_pool::graph};
}

graph_pool_checkpoint private_pool::checkpoint() {
  graph_pool_checkpoint c;
  c.pool_id = pool_id_;
  std::lock_guard lock{mutex_};
  for (const auto& [p, b] : blocks_) {
    c.segments.emplace_back(p, b.size);
    if (!b.free) {
      c.live.push_back({p, live_allocation{b.requested, b.size, syncmem::detail::stream_access::make(device_, b.stream),
                                           segment_pool::graph}});
    }
  }
  return c;
}

graph_pool_restored private_pool::restore(const graph_pool_checkpoint& c) {
  std::lock_guard lock{mutex_};
  for (const graph_pool_block& x : c.live) {
    const auto it = blocks_.find(x.ptr);
    SYNCMEM_EXPECTS(it != blocks_.end() && it->second.size == x.allocation.block_bytes,
                    fmt::format("{}: restore: the checkpoint's block at {} ({} bytes) is not a block of graph_pool {} "
                                "here any more",
                                name_, x.ptr, x.allocation.block_bytes, pool_id_));
  }
  graph_pool_restored r;
  for (auto& [p, b] : blocks_) {
    if (b.free) continue;
    r.freed.push_back({p, live_allocation{b.requested, b.size, syncmem::detail::stream_access::make(device_, b.stream),
                                          segment_pool::graph}});
    // Freed outside any capture: any later capture may reuse it.
    b.free = true;
    b.freed_in = 0;
    b.freed_on = stream_handle{};
    b.freed_after.reset();
    b.used_by.clear();
    usage_->allocated.fetch_sub(b.size);
  }
  for (const graph_pool_block& x : c.live) {
    block& b = blocks_.at(x.ptr);
    b.free = false;
    b.allocated_in = 0;
    b.requested = x.allocation.requested_bytes;
    b.stream = x.allocation.stream.handle();
    usage_->allocated.fetch_add(b.size);
    r.allocated.push_back({x.ptr, live_allocation{b.requested, b.size, x.allocation.stream, segment_pool::graph}});
  }
  return r;
}

// ---- private_pools ---------------------------------------------------------------------------------

private_pools::private_pools(device_id device, memory_resource* upstream, std::string name, release_fn release)
    : device_{device}, upstream_{upstream}, name_{std::move(name)}, release_{std::move(release)} {}

void* private_pools::allocate(std::size_t bytes, stream_view s, const syncmem::detail::capture_info& capture) {
  std::shared_ptr<private_pool> pool;
  {
    std::lock_guard lock{mutex_};
    if (auto it = by_pool_.find(capture.pool->id); it != by_pool_.end()) pool = it->second.lock();
    if (!pool) {
      std::erase_if(by_pool_, [](const auto& entry) { return entry.second.expired(); });
      pool = std::make_shared<private_pool>(device_, upstream_, *capture.pool, name_);
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
        if (capture && capture->pool->id != pool->pool_id()) capture->pool->hold(pool);
        // The pool goes here if its graphs are gone, or once no capture runs.
        syncmem::detail::release_after_captures(std::move(pool));
        return true;
      }
    }
    if (const auto capture = syncmem::detail::capture_on(s)) {
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

void private_pools::detach() noexcept {
  std::lock_guard lock{mutex_};
  release_ = nullptr;
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
