// ctest-labels: threaded
// The per-thread caches of a caching allocator: one per thread, found again
// at once, emptied on demand, handed back when their thread exits.
#include "mr/caching/thread_caches.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "mr/caching/caching_state.hpp"

namespace syncmem::mr::detail::caching {
namespace {

stream_handle fake_stream(std::uintptr_t n) { return stream_handle{n * 64}; }

// Resource ids of their own, apart from those of real resources.
std::uint64_t fresh_id() {
  static std::atomic<std::uint64_t> next{std::uint64_t{1} << 48};
  return next++;
}

class thread_caches_test : public ::testing::Test {
 protected:
  // A state to own the caches (they hold it weakly); the caches under test are apart from its own.
  std::shared_ptr<caching_state> state_ =
      std::make_shared<caching_state>(device_id::emulated(0), caching_options{}, nullptr, "thread_caches_test");
  thread_caches caches_{fresh_id(), std::size_t{1} << 20};
  block_store store_;

  // Puts a block into `tc`'s bin for (s, 4096).
  block* cache_one(thread_cache& tc, stream_handle s) {
    bool cacheable = false;
    (void)tc.take(s, 4096, cacheable);
    (void)tc.take(s, 4096, cacheable);
    block* b = store_.make();
    b->ptr = next_;
    next_ += 4096;
    b->size = 4096;
    b->key.store(4096);
    tc.remember(b, b->generation.load());
    EXPECT_TRUE(tc.give_back(reinterpret_cast<void*>(b->ptr), 4096, s));
    return b;
  }

  std::uintptr_t next_ = std::uintptr_t{1} << 32;
};

TEST_F(thread_caches_test, EachThreadHasItsOwnCache) {
  thread_cache* mine = caches_.of_this_thread(*state_);
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(caches_.of_this_thread(*state_), mine);
  thread_cache* theirs = nullptr;
  std::thread other{[&] { theirs = caches_.of_this_thread(*state_); }};
  other.join();
  EXPECT_NE(theirs, mine);
  int count = 0;
  caches_.for_each([&count](thread_cache&) { ++count; });
  EXPECT_EQ(count, 2);
  thread_caches none{fresh_id(), 0};
  EXPECT_EQ(none.of_this_thread(*state_), nullptr) << "a budget of 0 turns them off";
}

TEST_F(thread_caches_test, BlocksAreTakenBackByStreamOrAll) {
  thread_cache& tc = *caches_.of_this_thread(*state_);
  block* first = cache_one(tc, fake_stream(1));
  block* second = cache_one(tc, fake_stream(2));
  const auto of_one = caches_.take_stream(fake_stream(1));
  ASSERT_EQ(of_one.size(), 1U);
  EXPECT_EQ(of_one[0].first, fake_stream(1));
  EXPECT_EQ(of_one[0].second, first);
  EXPECT_EQ(tc.cached_bytes, 4096U);
  const auto all = caches_.take_all(/*wait=*/true);
  ASSERT_EQ(all.size(), 1U);
  EXPECT_EQ(all[0].second, second);
  EXPECT_EQ(tc.cached_bytes, 0U);
}

TEST_F(thread_caches_test, ACacheInUseIsSkippedUnlessWaitedFor) {
  thread_cache& tc = *caches_.of_this_thread(*state_);
  (void)cache_one(tc, fake_stream(1));
  {
    std::lock_guard held{tc.lock};
    EXPECT_TRUE(caches_.take_all(/*wait=*/false).empty());
  }
  EXPECT_EQ(caches_.take_all(/*wait=*/false).size(), 1U);
}

TEST_F(thread_caches_test, ClosedCachesTakeNothingMore) {
  thread_cache& tc = *caches_.of_this_thread(*state_);
  (void)cache_one(tc, fake_stream(1));
  EXPECT_EQ(caches_.close().size(), 1U);
  EXPECT_TRUE(tc.dead);
  int count = 0;
  caches_.for_each([&count](thread_cache&) { ++count; });
  EXPECT_EQ(count, 0);
  bool cacheable = false;
  block* b = store_.make();
  b->ptr = next_;
  b->size = 4096;
  b->key.store(4096);
  tc.remember(b, b->generation.load());
  (void)tc.take(fake_stream(1), 4096, cacheable);
  EXPECT_FALSE(tc.give_back(reinterpret_cast<void*>(b->ptr), 4096, fake_stream(1)));
}

}  // namespace
}  // namespace syncmem::mr::detail::caching
