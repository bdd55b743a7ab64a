#pragma once

// A lock for the per-thread caches: taken almost always by the thread that
// owns the cache, so it is nearly never contended and must cost only an
// atomic exchange. Under contention it spins briefly, then yields.

#include <atomic>
#include <thread>

namespace syncmem::mr::detail::caching {

class spinlock {
 public:
  void lock() noexcept {
    int spins = 0;
    while (flag_.exchange(true, std::memory_order_acquire)) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  [[nodiscard]] bool try_lock() noexcept {
    return !flag_.load(std::memory_order_relaxed) && !flag_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

}  // namespace syncmem::mr::detail::caching
