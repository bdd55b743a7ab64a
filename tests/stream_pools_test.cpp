// The caching allocator's free blocks by stream: split, merge, retire. The
// blocks here describe made-up addresses; no memory is touched.
#include "mr/caching/stream_pools.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <limits>

namespace syncmem::mr::detail::caching {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();

stream_handle fake_stream(std::uintptr_t n) { return stream_handle{n * 64}; }

// Segments at made-up addresses, each one free block of a pool.
class stream_pools_test : public ::testing::Test {
 protected:
  explicit stream_pools_test(std::size_t max_split = unlimited) : pools_{max_split} {}

  block* add_segment(std::size_t size, stream_pool& pool, pool_kind kind = pool_kind::large) {
    segment& seg = segments_.emplace_back();
    seg.base = next_base_;
    seg.size = size;
    seg.kind = kind;
    next_base_ += size + 64 * MiB;
    block* b = pools_.blocks().make();
    b->ptr = seg.base;
    b->size = size;
    b->seg = &seg;
    seg.first = b;
    return pools_.free_block(b, pool);
  }

  // A free block of `pool` for `key`, handed out.
  block* take(stream_pool& pool, pool_kind kind, std::size_t key) {
    block* b = pools_.take_free(pool, kind, key);
    if (b != nullptr) b->status = block_status::allocated;
    return b;
  }

  stream_pools pools_;
  std::deque<segment> segments_;
  std::uintptr_t next_base_ = 1 << 30;
};

class oversize_test : public stream_pools_test {
 protected:
  oversize_test() : stream_pools_test{2 * MiB} {}
};

TEST_F(stream_pools_test, TakingSplitsAndFreeingMergesBack) {
  stream_pool& pool = pools_.pool_for(fake_stream(1));
  EXPECT_EQ(&pools_.pool_for(fake_stream(1)), &pool);
  const block* whole = add_segment(8 * MiB, pool);
  block* a = take(pool, pool_kind::large, 3 * MiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ptr, whole->seg->base);
  EXPECT_EQ(a->size, 3 * MiB);
  block* b = take(pool, pool_kind::large, 1 * MiB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->ptr, a->end());
  EXPECT_EQ(pool.large.bytes(), 4 * MiB);
  EXPECT_EQ(pools_.splits(), 2U);
  EXPECT_EQ(take(pool, pool_kind::large, 5 * MiB), nullptr);
  EXPECT_EQ(take(pool, pool_kind::small, 512), nullptr);
  pools_.free_block(a, pool);
  block* merged = pools_.free_block(b, pool);
  EXPECT_EQ(merged->size, 8 * MiB);
  EXPECT_EQ(pool.large.count(), 1U);
  EXPECT_EQ(pools_.merges(), 2U);
  EXPECT_EQ(pools_.free_bytes(), 8 * MiB);
  EXPECT_EQ(pools_.largest_free(), 8 * MiB);
}

TEST_F(stream_pools_test, BlocksOfDifferentStreamsDoNotMerge) {
  stream_pool& first = pools_.pool_for(fake_stream(1));
  stream_pool& second = pools_.pool_for(fake_stream(2));
  add_segment(4 * MiB, first);
  block* a = take(first, pool_kind::large, 2 * MiB);
  pools_.free_block(a, second);  // freed on another stream: it belongs there now
  EXPECT_EQ(first.large.bytes(), 2 * MiB);
  EXPECT_EQ(second.large.bytes(), 2 * MiB);
  EXPECT_EQ(pools_.merges(), 0U);
  EXPECT_EQ(pools_.free_bytes(), 4 * MiB);
  EXPECT_EQ(pools_.largest_free(), 2 * MiB);
}

TEST_F(stream_pools_test, SplitKeepsRemaindersOfAGranuleOrMore) {
  stream_pool& pool = pools_.pool_for(fake_stream(1));
  add_segment(2 * MiB, pool, pool_kind::small);
  block* b = take(pool, pool_kind::small, 2 * MiB - 256);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size, 2 * MiB);  // a remainder under a granule stays with the block
  EXPECT_EQ(pools_.splits(), 0U);
}

TEST_F(stream_pools_test, ARetiredPoolMergesIntoTheIdlePool) {
  stream_pool& gone = pools_.pool_for(fake_stream(3));
  add_segment(4 * MiB, gone);
  stream_pool* retired = pools_.retire(fake_stream(3));
  ASSERT_EQ(retired, &gone);
  EXPECT_EQ(retired->kind, stream_pool::role::retired);
  EXPECT_EQ(pools_.live().count(fake_stream(3)), 0U);
  EXPECT_EQ(pools_.retire(fake_stream(3)), nullptr);
  // A new stream with the same handle gets a new pool, empty.
  stream_pool& fresh = pools_.pool_for(fake_stream(3));
  EXPECT_NE(&fresh, retired);
  EXPECT_EQ(take(fresh, pool_kind::large, MiB), nullptr);
  EXPECT_TRUE(pools_.merge_into_idle(*retired));
  pools_.drop_retired_if([](const stream_pool& p) { return p.kind == stream_pool::role::retired; });
  EXPECT_TRUE(pools_.retired().empty());
  EXPECT_EQ(pools_.idle().large.bytes(), 4 * MiB);
  EXPECT_EQ(pools_.free_bytes(), 4 * MiB);
}

TEST_F(oversize_test, OversizeBlocksServeOnlyRequestsNearTheirSize) {
  stream_pool& pool = pools_.pool_for(fake_stream(1));
  add_segment(64 * MiB, pool);
  EXPECT_EQ(take(pool, pool_kind::large, MiB), nullptr);
  block* b = take(pool, pool_kind::large, 60 * MiB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size, 64 * MiB);  // kept whole
  pools_.free_block(b, pool);
  pools_.serve_oversize_freely();
  EXPECT_NE(take(pool, pool_kind::large, MiB), nullptr);
}

}  // namespace
}  // namespace syncmem::mr::detail::caching
