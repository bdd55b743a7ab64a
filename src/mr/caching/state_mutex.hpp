#pragma once

// The caching allocator's lock. Its slow path takes it once per call, so the
// uncontended case must cost one locked instruction to take and one to give
// back, inline: std::mutex adds a call into the C library and its owner
// bookkeeping to every one. Contended, it spins
// briefly, then sleeps on the lock word (a futex on Linux), since the holder
// may be inside a device call for milliseconds.

#include <atomic>

namespace syncmem::mr::detail::caching {

class state_mutex {
 public:
  void lock() noexcept {
    int expected = free;
    if (state_.compare_exchange_strong(expected, held, std::memory_order_acquire)) [[likely]] {
      return;
    }
    lock_contended();
  }

  void unlock() noexcept {
    if (state_.exchange(free, std::memory_order_release) == contended) [[unlikely]] {
      state_.notify_one();
    }
  }

 private:
  static constexpr int free = 0;
  static constexpr int held = 1;
  static constexpr int contended = 2;  // held, and a thread may be asleep on it

  void lock_contended() noexcept {
    for (int spins = 0; spins < 128; ++spins) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      int expected = free;
      if (state_.load(std::memory_order_relaxed) == free &&
          state_.compare_exchange_strong(expected, held, std::memory_order_acquire)) {
        return;
      }
    }
    // Whoever takes it from here marks it contended, so that its unlock wakes
    // the next sleeper.
    while (state_.exchange(contended, std::memory_order_acquire) != free) {
      state_.wait(contended, std::memory_order_relaxed);
    }
  }

  std::atomic<int> state_{free};
};

}  // namespace syncmem::mr::detail::caching
