#include "backend/emulated/emulated_pools.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/emulated/emulated_backend.hpp"
#include "core/ignored_failure.hpp"
#include "core/log.hpp"

namespace syncmem::detail::emulated {

// A stream-ordered pool (the emulated cudaMemPoolCreate). A freed block is
// `pending` until its stream's worker reaches the free; meanwhile only that
// stream may reuse it (its later work runs after the free, as with CUDA's
// same-stream reuse). Once reached it moves to `cached`, free for any stream.
struct memory_pool {
  struct pending_free {
    std::size_t size;
    const void* stream;    // the worker_stream the block was freed on
    std::uint64_t ticket;  // tells a stale give-back from the current one
  };
  std::mutex mutex;
  int device = 0;
  std::size_t release_threshold = 0;
  std::size_t max_size = 0;                  // 0: the device's memory
  std::multimap<std::size_t, void*> cached;  // by size
  std::unordered_map<void*, std::size_t> live;
  std::unordered_map<void*, pending_free> pending;
  std::multimap<std::pair<const void*, std::size_t>, void*> pending_by_stream;  // (stream, size)
  std::uint64_t next_ticket = 0;
  std::size_t cached_bytes = 0;
  memory_pool_usage usage;
  bool destroyed = false;

  // Under mutex: forgets p's pending free, so that its give-back does nothing.
  void drop_pending(void* p) {
    auto it = pending.find(p);
    auto [first, last] = pending_by_stream.equal_range({it->second.stream, it->second.size});
    for (auto b = first; b != last; ++b) {
      if (b->second == p) {
        pending_by_stream.erase(b);
        break;
      }
    }
    pending.erase(it);
  }
};

namespace {

struct pool_holder {
  std::shared_ptr<memory_pool> pool;  // shared with frees still queued on streams
};

pool_holder* holder_of(pool_handle pool) noexcept { return pointer_of<pool_holder*>(pool); }

}  // namespace

bool emulated_pools::supported(int index) {
  (void)backend_.device(index);
  return true;
}

pool_handle emulated_pools::create(int index, std::size_t release_threshold, std::size_t max_size) {
  (void)backend_.device(index);
  auto* holder = new pool_holder{std::make_shared<memory_pool>()};
  holder->pool->device = index;
  holder->pool->release_threshold = release_threshold;
  holder->pool->max_size = max_size;
  return handle_of<pool_handle>(holder);
}

void emulated_pools::destroy(int, pool_handle handle) noexcept {
  auto* holder = holder_of(handle);
  std::vector<void*> release;
  {
    std::lock_guard lock{holder->pool->mutex};
    holder->pool->destroyed = true;
    for (auto& entry : holder->pool->cached) release.push_back(entry.second);
    holder->pool->cached.clear();
    holder->pool->cached_bytes = 0;
  }
  for (void* p : release) backend_.free_now(holder->pool->device, p);
  delete holder;
}

void* emulated_pools::allocate(int index, pool_handle handle, std::size_t bytes, stream_handle s) {
  auto& w = backend_.to_stream(s, index);
  backend_.refuse_to_record(w, "a stream-ordered allocation");
  const void* stream = &w;
  auto& pool = *holder_of(handle)->pool;
  const std::size_t size = round_up(std::max<std::size_t>(bytes, 1), device_alignment);
  std::unique_lock lock{pool.mutex};
  std::size_t block = 0;
  void* p = take_pool_block(pool, stream, size, block);
  if (p == nullptr && !pool.pending.empty()) {
    // Frees still queued on other streams hold memory that CUDA would hand
    // over behind an event; waiting for them is the emulated equivalent.
    lock.unlock();
    backend_.wait_device_idle(index);
    lock.lock();
    p = take_pool_block(pool, stream, size, block);
  }
  if (p == nullptr) return nullptr;
  pool.live.emplace(p, block);
  pool.usage.used += block;
  pool.usage.used_high = std::max(pool.usage.used_high, pool.usage.used);
  return p;
}

void emulated_pools::deallocate(int index, pool_handle handle, void* p, stream_handle s) noexcept {
  std::shared_ptr<memory_pool> pool = holder_of(handle)->pool;
  worker_stream* w = nullptr;
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock{pool->mutex};
    auto it = pool->live.find(p);
    if (it == pool->live.end()) {
      logger().error("emulated pool free of {} which the pool did not allocate", p);
      return;
    }
    const std::size_t size = it->second;
    pool->live.erase(it);
    pool->usage.used -= size;
    // Without a usable stream the block is free at once.
    detail::ignore_failure("finding the stream of a stream-ordered free", [&] { w = &backend_.to_stream(s, index); });
    ticket = ++pool->next_ticket;
    pool->pending.emplace(p, memory_pool::pending_free{size, w, ticket});
    if (w != nullptr) pool->pending_by_stream.emplace(std::pair<const void*, std::size_t>{w, size}, p);
  }
  auto give_back = [this, pool, p, ticket] {
    std::lock_guard lock{pool->mutex};
    auto it = pool->pending.find(p);
    if (it == pool->pending.end() || it->second.ticket != ticket) return;  // reused on its stream since
    const std::size_t size = it->second.size;
    pool->drop_pending(p);
    if (pool->destroyed) {
      pool->usage.reserved -= size;
      backend_.free_now(pool->device, p);
      return;
    }
    pool->cached.emplace(size, p);
    pool->cached_bytes += size;
    if (pool->cached_bytes > pool->release_threshold) release_cached(*pool, pool->release_threshold);
  };
  if (w != nullptr) {
    try {
      // A free cannot be recorded yet: it fails the capture, and the block
      // goes back once the work enqueued before the capture has run.
      w->invalidate_capture("a stream-ordered free, which emulated devices cannot record yet");
      w->enqueue_uncaptured(give_back);
      return;
    } catch (...) {
      // the stream cannot take it, so the block is free at once
      detail::log_ignored("handing a stream-ordered free to its stream");
    }
  }
  give_back();
}

void emulated_pools::trim(int, pool_handle handle, std::size_t keep_bytes) {
  auto& pool = *holder_of(handle)->pool;
  std::lock_guard lock{pool.mutex};
  release_cached(pool, keep_bytes);
}

memory_pool_usage emulated_pools::usage(int, pool_handle handle) {
  auto& pool = *holder_of(handle)->pool;
  std::lock_guard lock{pool.mutex};
  return pool.usage;
}

void emulated_pools::reset_peaks(int, pool_handle handle) {
  auto& pool = *holder_of(handle)->pool;
  std::lock_guard lock{pool.mutex};
  pool.usage.reserved_high = pool.usage.reserved;
  pool.usage.used_high = pool.usage.used;
}

void* emulated_pools::take_pool_block(memory_pool& pool, const void* stream, std::size_t size, std::size_t& block) {
  // Best fit up to twice the size: CUDA's pools split blocks, and without
  // this a workload of many sizes caches blocks that never fit again.
  const std::size_t largest = size > std::numeric_limits<std::size_t>::max() / 2 ? size : size * 2;
  if (auto it = pool.pending_by_stream.lower_bound({stream, size});
      it != pool.pending_by_stream.end() && it->first.first == stream && it->first.second <= largest) {
    void* p = it->second;
    block = it->first.second;
    pool.drop_pending(p);
    return p;
  }
  if (auto it = pool.cached.lower_bound(size); it != pool.cached.end() && it->first <= largest) {
    void* p = it->second;
    block = it->first;
    pool.cached_bytes -= block;
    pool.cached.erase(it);
    return p;
  }
  block = size;
  const auto within_max = [&pool, size] {
    return pool.max_size == 0 || (size <= pool.max_size && pool.usage.reserved <= pool.max_size - size);
  };
  void* p = within_max() ? backend_.allocate(pool.device, size) : nullptr;
  if (p == nullptr && pool.cached_bytes > 0) {  // give the cache back and try again, as CUDA's pools do
    release_cached(pool, 0);
    p = within_max() ? backend_.allocate(pool.device, size) : nullptr;
  }
  if (p == nullptr) return nullptr;
  pool.usage.reserved += size;
  pool.usage.reserved_high = std::max(pool.usage.reserved_high, pool.usage.reserved);
  return p;
}

void emulated_pools::release_cached(memory_pool& pool, std::size_t keep) noexcept {
  while (pool.cached_bytes > keep && !pool.cached.empty()) {
    auto it = std::prev(pool.cached.end());
    pool.cached_bytes -= it->first;
    pool.usage.reserved -= it->first;
    backend_.free_now(pool.device, it->second);
    pool.cached.erase(it);
  }
}

}  // namespace syncmem::detail::emulated
