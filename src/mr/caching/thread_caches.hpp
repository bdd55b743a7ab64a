#pragma once

// The per-thread caches of one caching allocator (thread_cache.hpp): makes a
// thread's cache on its first use, finds it again with one comparison, takes
// blocks back from the caches of all threads when the allocator needs them,
// and hands a thread's blocks back to the allocator when the thread exits.
//
// Its mutex guards the list of caches; it nests inside the allocator's lock
// and outside each cache's spinlock.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "mr/caching/block.hpp"
#include "mr/caching/thread_cache.hpp"

namespace syncmem::mr::detail::caching {

// The cache this thread used last, by resource id.
namespace this_thread {
extern constinit thread_local std::uint64_t cache_id;
extern constinit thread_local thread_cache* cache;
extern constinit thread_local bool exited;  // its caches are gone: it is exiting
}  // namespace this_thread

using drained_blocks = std::vector<std::pair<stream_handle, block*>>;

class thread_caches {
 public:
  // budget: bytes one thread may keep (0: no per-thread caches).
  thread_caches(std::uint64_t resource_id, std::size_t budget) : id_{resource_id}, budget_{budget} {}
  thread_caches(const thread_caches&) = delete;
  thread_caches& operator=(const thread_caches&) = delete;

  // This thread's cache, made on first use; nullptr when there are none.
  [[nodiscard]] thread_cache* of_this_thread(caching_state& state) {
    if (this_thread::cache_id == id_) return this_thread::cache;
    if (budget_ == 0 || this_thread::exited) return nullptr;
    return find_or_make(state);
  }

  // This thread's cache if it has one already (and used it last); never makes one.
  [[nodiscard]] thread_cache* made_for_this_thread() const noexcept {
    return this_thread::cache_id == id_ ? this_thread::cache : nullptr;
  }

  // Every cached block; without `wait`, caches in use by their thread are skipped.
  [[nodiscard]] drained_blocks take_all(bool wait);
  // The cached blocks of one stream.
  [[nodiscard]] drained_blocks take_stream(stream_handle s);
  // Every cached block, and no cache takes more: the allocator is going.
  [[nodiscard]] drained_blocks close();
  // Drops an exited thread's cache, after absorb(cache) has taken its counts.
  template <class F>
  void forget(thread_cache& cache, F&& absorb) {
    std::lock_guard lock{mutex_};
    absorb(cache);
    std::erase_if(caches_, [&cache](const std::shared_ptr<thread_cache>& c) { return c.get() == &cache; });
  }
  // f(thread_cache&) for each cache, under the list's lock.
  template <class F>
  void for_each(F&& f) const {
    std::lock_guard lock{mutex_};
    for (const auto& c : caches_) f(*c);
  }

 private:
  thread_cache* find_or_make(caching_state& state);
  [[nodiscard]] std::vector<std::shared_ptr<thread_cache>> copy() const;

  const std::uint64_t id_;
  const std::size_t budget_;
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<thread_cache>> caches_;
};

}  // namespace syncmem::mr::detail::caching
