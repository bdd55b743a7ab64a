// The caching allocator's ordinary segments, from the device or an upstream.
#include "mr/caching/device_segments.hpp"

#include <gtest/gtest.h>

#include "counting_resource.hpp"
#include "device_ops.hpp"
#include "memory_pattern.hpp"
#include "test_support.hpp"

namespace syncmem::mr::detail::caching {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
const device_id device = device_id::emulated(0);

struct parts {
  explicit parts(memory_resource* upstream = nullptr, std::optional<std::size_t> limit = std::nullopt)
      : reserved{limit}, segments{device, upstream, reserved, pools} {}
  reservation reserved;
  stream_pools pools{std::numeric_limits<std::size_t>::max()};
  device_segments segments;
};

TEST(DeviceSegments, ASegmentIsOneFreeBlockOfUsableMemory) {
  parts p;
  stream s{device};
  stream_pool& pool = p.pools.pool_for(s.view().handle());
  block* b = p.segments.grow(pool_kind::large, 4 * MiB, pool, s);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size, 4 * MiB);
  EXPECT_EQ(b->owner, &pool);
  EXPECT_EQ(b->seg->stream, s.view().handle());
  EXPECT_EQ(p.reserved.bytes(), 4 * MiB);
  EXPECT_EQ(p.reserved.growths(), 1U);
  ASSERT_EQ(p.segments.all().size(), 1U);
  const auto seed = syncmem::test::fresh_seed();
  syncmem::test::device_fill_pattern(s, reinterpret_cast<void*>(b->ptr), b->size, seed);
  EXPECT_TRUE(syncmem::test::holds_pattern(memory_kind::device, s, reinterpret_cast<void*>(b->ptr), b->size, seed));
  p.pools.free_block(b, pool);
  ASSERT_EQ(p.segments.idle().size(), 1U);
  EXPECT_EQ(p.segments.drop(*p.segments.idle().front()), 4 * MiB);
  EXPECT_TRUE(p.segments.all().empty());
  EXPECT_EQ(p.reserved.bytes(), 0U);
  EXPECT_EQ(p.reserved.releases(), 1U);
  EXPECT_EQ(p.pools.free_bytes(), 0U);
}

TEST(DeviceSegments, OnlyWhollyFreeSegmentsAreIdleLargestFirst) {
  parts p;
  stream s{device};
  stream_pool& pool = p.pools.pool_for(s.view().handle());
  block* small = p.segments.grow(pool_kind::small, 2 * MiB, pool, s);
  block* large = p.segments.grow(pool_kind::large, 8 * MiB, pool, s);
  block* used = p.segments.grow(pool_kind::large, 6 * MiB, pool, s);
  ASSERT_TRUE(small && large && used);
  p.pools.free_block(small, pool);
  p.pools.free_block(large, pool);
  used->status = block_status::allocated;
  const auto idle = p.segments.idle();
  ASSERT_EQ(idle.size(), 2U);
  EXPECT_EQ(idle[0]->size, 8 * MiB);
  EXPECT_EQ(idle[1]->size, 2 * MiB);
  p.segments.release_all(true);
  EXPECT_TRUE(p.segments.all().empty());
}

TEST(DeviceSegments, TheLimitRefusesBeforeTheDeviceIsAsked) {
  syncmem::test::counting_device_resource upstream{device};
  parts p{&upstream, 5 * MiB};
  stream s{device};
  stream_pool& pool = p.pools.pool_for(s.view().handle());
  ASSERT_NE(p.segments.grow(pool_kind::large, 4 * MiB, pool, s), nullptr);
  EXPECT_EQ(upstream.allocations.load(), 1);
  EXPECT_EQ(p.segments.grow(pool_kind::large, 2 * MiB, pool, s), nullptr);
  EXPECT_TRUE(p.reserved.limit_hit());
  EXPECT_EQ(upstream.allocations.load(), 1);
  p.segments.release_all(true);
  EXPECT_EQ(upstream.live.load(), 0);
}

TEST(DeviceSegments, AnUpstreamThatRefusesIsOutOfMemoryNotAnError) {
  parts p;
  stream s{device};
  stream_pool& pool = p.pools.pool_for(s.view().handle());
  const std::size_t too_much = get_memory_info(device).total * 2;
  EXPECT_EQ(p.segments.grow(pool_kind::large, too_much, pool, s), nullptr);
  EXPECT_FALSE(p.reserved.limit_hit());
  EXPECT_EQ(p.reserved.bytes(), 0U);
}

}  // namespace
}  // namespace syncmem::mr::detail::caching
