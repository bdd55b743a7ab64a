// One thread's cache of a caching allocator: the fast path's own operations.
// The blocks describe made-up addresses; no memory is touched.
#include "mr/caching/thread_cache.hpp"

#include <gtest/gtest.h>

namespace syncmem::mr::detail::caching {
namespace {

stream_handle fake_stream(std::uintptr_t n) { return stream_handle{n * 64}; }

class thread_cache_test : public ::testing::Test {
 protected:
  // A block as the allocator hands it out for `bytes`, remembered by the cache.
  block* handed(std::size_t bytes) {
    block* b = store_.make();
    b->ptr = next_;
    b->size = round_up(bytes, granule);
    next_ += b->size;
    b->key.store(b->size);
    b->requested.store(bytes);
    next_generation(b);
    cache_.remember(b, b->generation.load());
    return b;
  }
  void* address(const block* b) { return reinterpret_cast<void*>(b->ptr); }

  block_store store_;
  std::uintptr_t next_ = std::uintptr_t{1} << 32;
  thread_cache cache_{{}, nullptr, 1, std::size_t{1} << 20};
};

TEST_F(thread_cache_test, ASizeGetsABinOnItsSecondMiss) {
  bool cacheable = true;
  EXPECT_EQ(cache_.take(fake_stream(1), 4096, cacheable), nullptr);
  EXPECT_FALSE(cacheable);
  EXPECT_EQ(cache_.take(fake_stream(1), 4096, cacheable), nullptr);
  EXPECT_TRUE(cacheable);
  EXPECT_EQ(cache_.take(fake_stream(2), 4096, cacheable), nullptr);
  EXPECT_FALSE(cacheable) << "another stream is another bin";
}

TEST_F(thread_cache_test, AFreedBlockComesBackOnItsStreamOnly) {
  bool cacheable = false;
  (void)cache_.take(fake_stream(1), 4096, cacheable);
  (void)cache_.take(fake_stream(1), 4096, cacheable);
  block* b = handed(4000);
  EXPECT_FALSE(cache_.give_back(address(b), 4000, fake_stream(2))) << "no bin for that stream";
  cache_.remember(b, b->generation.load());
  EXPECT_TRUE(cache_.give_back(address(b), 4000, fake_stream(1)));
  EXPECT_EQ(cache_.cached_bytes, 4096U);
  EXPECT_EQ(cache_.deallocations.load(), 1U);
  EXPECT_EQ(cache_.take(fake_stream(2), 4096, cacheable), nullptr);
  EXPECT_EQ(cache_.take(fake_stream(1), 4096, cacheable), b);
  EXPECT_EQ(cache_.cached_bytes, 0U);
  const auto generation = b->generation.load();
  (void)cache_.hand_out(b, fake_stream(1), 4000, 0);
  EXPECT_NE(b->generation.load(), generation);
  EXPECT_EQ(cache_.hits.load(), 1U);
  EXPECT_EQ(cache_.live_delta.load(), 0);
  EXPECT_TRUE(cache_.give_back(address(b), 4000, fake_stream(1))) << "hand_out remembers it";
}

TEST_F(thread_cache_test, WhatItCannotCheckGoesToTheSlowPath) {
  bool cacheable = false;
  (void)cache_.take(fake_stream(1), 4096, cacheable);
  (void)cache_.take(fake_stream(1), 4096, cacheable);
  EXPECT_FALSE(cache_.give_back(reinterpret_cast<void*>(std::uintptr_t{512}), 4096, fake_stream(1))) << "not its own";
  block* stale = handed(4096);
  next_generation(stale);  // went back through another thread
  EXPECT_FALSE(cache_.give_back(address(stale), 4096, fake_stream(1)));
  block* wrong_size = handed(4096);
  EXPECT_FALSE(cache_.give_back(address(wrong_size), 8192, fake_stream(1)));
  block* used = handed(4096);
  used->needs_slow_free.store(true);
  EXPECT_FALSE(cache_.give_back(address(used), 4096, fake_stream(1)));
  EXPECT_EQ(cache_.cached_bytes, 0U);
}

TEST_F(thread_cache_test, TheBudgetAndTheBinLimitHold) {
  bool cacheable = false;
  const std::size_t big = std::size_t{512} << 10;
  (void)cache_.take(fake_stream(1), big, cacheable);
  (void)cache_.take(fake_stream(1), big, cacheable);
  block* a = handed(big);
  block* b = handed(big);
  block* c = handed(big);
  EXPECT_TRUE(cache_.give_back(address(a), big, fake_stream(1)));
  EXPECT_TRUE(cache_.give_back(address(b), big, fake_stream(1)));
  EXPECT_FALSE(cache_.give_back(address(c), big, fake_stream(1))) << "over the 1 MiB budget";
  EXPECT_EQ(cache_.cached_bytes, 2 * big);
  cache_.dead = true;
  block* d = handed(big);
  EXPECT_FALSE(cache_.give_back(address(d), big, fake_stream(1))) << "a dead cache takes nothing";
}

}  // namespace
}  // namespace syncmem::mr::detail::caching
