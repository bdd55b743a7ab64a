// ctest-labels: threaded
// The caching allocator's lock: mutual exclusion, and a thread that went to
// sleep on it is woken by the unlock.
#include "mr/caching/state_mutex.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include "test_support.hpp"

namespace syncmem::mr::detail::caching {
namespace {

// Each thread adds its own random amounts to a plain counter under the lock,
// with a read, a pause and a write, so that any overlap loses an addition.
TEST(StateMutex, ExcludesEveryOtherHolder) {
  constexpr int threads = 6;
  constexpr int rounds = 4000;
  state_mutex m;
  std::uint64_t counter = 0;
  std::vector<std::vector<std::uint32_t>> amounts(threads);
  std::uint64_t expected = 0;
  for (auto& list : amounts) {
    for (int i = 0; i < rounds; ++i) {
      list.push_back(static_cast<std::uint32_t>(test::rng()() % 1000) + 1);
      expected += list.back();
    }
  }
  std::latch start{threads};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      start.arrive_and_wait();
      for (std::uint32_t amount : amounts[static_cast<std::size_t>(t)]) {
        std::lock_guard lock{m};
        const std::uint64_t seen = counter;
        if (amount % 64 == 0) std::this_thread::yield();  // now and then, a holder is descheduled
        counter = seen + amount;
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(counter, expected);
}

// The holder keeps the lock until the waiter has spun past its spins and gone
// to sleep on it (it then marks the lock contended); the unlock must wake it.
TEST(StateMutex, UnlockWakesASleepingWaiter) {
  state_mutex m;
  m.lock();
  std::atomic<bool> got{false};
  std::thread waiter{[&] {
    m.lock();
    got = true;
    m.unlock();
  }};
  // Long enough for the waiter's few hundred pauses many times over; the
  // result does not depend on it: awake or asleep, it must get the lock.
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  EXPECT_FALSE(got.load());
  m.unlock();
  waiter.join();
  EXPECT_TRUE(got.load());
  // Free again, uncontended.
  m.lock();
  m.unlock();
}

}  // namespace
}  // namespace syncmem::mr::detail::caching
