// The caching allocator's growable range (expandable segments), on an emulated device.
#include "mr/caching/growable_range.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "device_ops.hpp"
#include "memory_pattern.hpp"
#include "test_support.hpp"

namespace syncmem::mr::detail::caching {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
const device_id device = device_id::emulated(0);

struct parts {
  explicit parts(bool enabled = true, bool release_before_grow = false, bool grow_from_idle = false,
                 std::size_t page_size = 0, std::size_t large_page_size = 0)
      : range{device,
              {enabled, release_before_grow, grow_from_idle, page_size, large_page_size},
              "growable_range_test",
              pools,
              reserved,
              events,
              observers} {}
  ~parts() {
    synchronize_device(device);
    range.release_all();
    events.destroy_all();
  }
  parts(const parts&) = delete;
  parts& operator=(const parts&) = delete;
  reservation reserved{std::nullopt};
  stream_pools pools{2 * MiB};
  caching_events events{device};
  segment_observers observers;
  growable_range range;
};

// Two streams of the device and their pools in `p`.
struct two_streams {
  explicit two_streams(parts& p)
      : pool{p.pools.pool_for(s.view().handle())}, elsewhere{p.pools.pool_for(other.view().handle())} {}
  stream s{device};
  stream other{device};
  stream_pool& pool;
  stream_pool& elsewhere;
};

void expect_usable(stream_view s, const block* b) {
  const auto seed = syncmem::test::fresh_seed();
  auto* p = reinterpret_cast<void*>(b->ptr);
  syncmem::test::device_fill_pattern(s, p, b->size, seed);
  EXPECT_TRUE(syncmem::test::holds_pattern(memory_kind::device, s, p, b->size, seed));
}

// The record of the block at `address` in the range.
const block* block_at(const parts& p, std::uintptr_t address) {
  for (const block* b = p.range.range()->first; b != nullptr; b = b->next) {
    if (b->ptr == address) return b;
  }
  return nullptr;
}

// A growth of `bytes` past the limit is refused whole: nothing reserved, no page mapped.
void expect_refused(parts& p, stream_pool& pool, std::size_t bytes) {
  ASSERT_TRUE(p.range.ready());
  EXPECT_EQ(p.range.grow(bytes, pool), nullptr);
  EXPECT_TRUE(p.reserved.limit_hit());
  EXPECT_EQ(p.reserved.bytes(), 0U);
  EXPECT_FALSE(p.range.has_mapped_pages());
}

TEST(GrowableRange, OffUnlessAskedFor) {
  parts p{false};
  EXPECT_FALSE(p.range.ready());
  EXPECT_FALSE(p.range.in_use());
  EXPECT_EQ(p.range.range(), nullptr);
}

TEST(GrowableRange, GrowsByPagesAndExtendsThePoolsLastBlock) {
  parts p;
  stream s{device};
  stream_pool& pool = p.pools.pool_for(s.view().handle());
  ASSERT_TRUE(p.range.ready());
  EXPECT_TRUE(p.range.in_use());
  block* a = p.range.grow(3 * MiB, pool);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ptr, p.range.range()->base);
  EXPECT_EQ(a->size, 3 * MiB);
  EXPECT_TRUE(p.range.has_mapped_pages());
  const std::size_t first = p.reserved.bytes();
  EXPECT_GE(first, 3 * MiB);
  expect_usable(s, a);
  block* b = p.range.grow(first, pool);  // the rest of the mapped pages, then more right after them
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->ptr, a->end());
  EXPECT_GT(p.reserved.bytes(), first);
  expect_usable(s, b);
  EXPECT_EQ(p.reserved.growths(), 2U);
}

TEST(GrowableRange, ReclaimUnmapsFreePagesAndGivesThemBack) {
  parts p;
  stream s{device};
  stream_pool& pool = p.pools.pool_for(s.view().handle());
  ASSERT_TRUE(p.range.ready());
  block* a = p.range.grow(16 * MiB, pool);
  ASSERT_NE(a, nullptr);
  const std::size_t reserved = p.reserved.bytes();
  p.pools.free_block(a, pool);
  EXPECT_EQ(p.range.reclaim(reserved, /*keep_handles=*/false), reserved);
  EXPECT_EQ(p.reserved.bytes(), 0U);
  EXPECT_FALSE(p.range.has_mapped_pages());
  EXPECT_EQ(p.pools.free_bytes(), 0U);
  block* again = p.range.grow(MiB, pool);  // the hole is mapped again
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->ptr, p.range.range()->base);
  expect_usable(s, again);
}

TEST(GrowableRange, TheLimitRefusesNewPages) {
  parts p;
  p.reserved.set_limit(4 * MiB);
  stream s{device};
  expect_refused(p, p.pools.pool_for(s.view().handle()), 64 * MiB);
}

TEST(GrowableRange, IdlePagesMoveWhereGrowthNeedsThem) {
  parts p{true, true};
  two_streams streams{p};
  auto& [s, other, pool, elsewhere] = streams;
  ASSERT_TRUE(p.range.ready());
  block* idle = p.range.grow(32 * MiB, elsewhere);
  ASSERT_NE(idle, nullptr);
  p.pools.free_block(idle, elsewhere);
  const std::size_t reserved = p.reserved.bytes();
  block* moved = p.range.grow(24 * MiB, pool);  // another pool: the idle pages are moved, not added to
  ASSERT_NE(moved, nullptr);
  EXPECT_LE(p.reserved.bytes(), reserved);
  expect_usable(s, moved);
}

// A few idle pages, far less than a quarter of the reserve: growth takes them
// with grow_from_idle, and maps new ones without.
TEST(GrowableRange, GrowFromIdleTakesEvenAFewIdlePages) {
  for (const bool from_idle : {true, false}) {
    parts p{true, true, from_idle};
    two_streams streams{p};
    auto& [s, other, pool, elsewhere] = streams;
    ASSERT_TRUE(p.range.ready());
    block* in_use = p.range.grow(64 * MiB, pool);
    ASSERT_NE(in_use, nullptr);
    in_use->status = block_status::allocated;  // as the allocator marks what it hands out
    block* idle = p.range.grow(4 * MiB, elsewhere);
    ASSERT_NE(idle, nullptr);
    p.pools.free_block(idle, elsewhere);
    const std::size_t reserved = p.reserved.bytes();
    EXPECT_EQ(reserved, 68 * MiB);
    block* grown = p.range.grow(4 * MiB, pool);
    ASSERT_NE(grown, nullptr);
    EXPECT_EQ(p.reserved.bytes(), from_idle ? reserved : reserved + 4 * MiB) << "grow_from_idle " << from_idle;
    EXPECT_EQ(p.reserved.peak(), from_idle ? reserved : reserved + 4 * MiB) << "grow_from_idle " << from_idle;
    expect_usable(s, grown);
    expect_usable(s, in_use);
  }
}

// grow_from_idle takes idle pages from the smallest free blocks first, so that
// a large free block stays whole for the large request it can serve.
TEST(GrowableRange, GrowFromIdleTakesPagesFromTheSmallestFreeBlocksFirst) {
  parts p{true, true, true};  // 2 MiB pages
  two_streams streams{p};
  auto& [s, other, pool, elsewhere] = streams;
  ASSERT_TRUE(p.range.ready());
  // [0, 4) in use, [4, 8) small, [8, 12) in use, [12, 28) large, [28, 32) in use.
  std::vector<block*> blocks;
  for (const std::size_t size : {4 * MiB, 4 * MiB, 4 * MiB, 16 * MiB, 4 * MiB}) {
    block* b = p.range.grow(size, elsewhere);
    ASSERT_NE(b, nullptr);
    b->status = block_status::allocated;
    blocks.push_back(b);
  }
  block* const small = p.pools.free_block(blocks[1], elsewhere);
  block* const large = p.pools.free_block(blocks[3], elsewhere);
  const std::uintptr_t small_at = small->ptr;
  const std::size_t reserved = p.reserved.bytes();
  ASSERT_EQ(reserved, 32 * MiB);
  block* grown = p.range.grow(4 * MiB, pool);
  ASSERT_NE(grown, nullptr);
  EXPECT_EQ(grown->ptr, p.range.range()->base + 32 * MiB);  // the small block's pages, moved to the top
  const block* moved = block_at(p, small_at);
  ASSERT_NE(moved, nullptr);
  EXPECT_EQ(moved->status, block_status::moving);  // mapped there too until earlier work has passed
  EXPECT_EQ(moved->size, 4 * MiB);
  EXPECT_EQ(p.reserved.bytes(), reserved);
  EXPECT_EQ(large->status, block_status::free);
  EXPECT_EQ(large->size, 16 * MiB);
  expect_usable(s, grown);
  expect_usable(other, large);
}

// Moving pages does not wait for the device: a growth takes the idle pages of
// a stream whose work is still queued (held on a host latch here), maps them
// at its new place, and makes the growing stream wait for that work; the old
// place is unmapped by a later growth once the work has passed.
TEST(GrowableRange, MovingPagesWaitsForTheirStreamNotForTheDevice) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  parts p{true, true, true};  // 2 MiB pages
  two_streams streams{p};
  auto& [s, other, pool, elsewhere] = streams;
  ASSERT_TRUE(p.range.ready());
  block* in_use = p.range.grow(6 * MiB, pool);  // [0, 6) in use on s
  ASSERT_NE(in_use, nullptr);
  in_use->status = block_status::allocated;
  block* idle = p.range.grow(8 * MiB, elsewhere);  // [6, 14)
  ASSERT_NE(idle, nullptr);
  idle->status = block_status::allocated;
  const std::uintptr_t idle_at = idle->ptr;
  syncmem::test::stream_latch hold{other};
  syncmem::test::device_fill_pattern(other, reinterpret_cast<void*>(idle_at), 8 * MiB, syncmem::test::fresh_seed());
  idle->status = block_status::free;
  p.pools.free_block(idle, elsewhere);  // freed in the order of `other`: its fill is still queued
  const std::size_t reserved = p.reserved.bytes();
  block* grown = p.range.grow(10 * MiB, pool);  // the 8 MiB of idle pages moved, and one new page
  ASSERT_NE(grown, nullptr);
  EXPECT_FALSE(hold.timed_out()) << "the growth waited for the held stream";
  EXPECT_EQ(p.reserved.bytes(), reserved + 2 * MiB);
  EXPECT_EQ(p.range.moves_in_flight(), 1U);
  ASSERT_NE(block_at(p, idle_at), nullptr);
  EXPECT_EQ(block_at(p, idle_at)->status, block_status::moving);
  const auto seed = syncmem::test::fresh_seed();
  syncmem::test::device_fill_pattern(s, reinterpret_cast<void*>(grown->ptr), grown->size, seed);
  hold.release();
  EXPECT_TRUE(
      syncmem::test::holds_pattern(memory_kind::device, s, reinterpret_cast<void*>(grown->ptr), grown->size, seed))
      << "the growing stream wrote before the work on the moved pages was done";
  synchronize_device(device);
  block* next = p.range.grow(2 * MiB, pool);  // settles the move first
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(p.range.moves_in_flight(), 0U);
  ASSERT_NE(block_at(p, idle_at), nullptr);
  EXPECT_EQ(block_at(p, idle_at)->status, block_status::unmapped);
  expect_usable(s, in_use);
}

// Large pages moved into a growth that cannot map them all whole (its place
// is not aligned to them) are given back, but their memory counts in the
// reserve until their old place is unmapped. A growth too small for large
// pages leaves them where they are.
TEST(GrowableRange, AMovedLargePageLetGoCountsUntilItsOldPlaceIsUnmapped) {
  parts p{true, true, true, 0, 20 * MiB};
  two_streams streams{p};
  auto& [s, other, pool, elsewhere] = streams;
  ASSERT_TRUE(p.range.ready());
  block* a = p.range.grow(300 * MiB, elsewhere);  // [0, 300): fifteen large pages
  ASSERT_NE(a, nullptr);
  block* b = p.range.grow(2 * MiB, pool);  // [300, 302)
  ASSERT_NE(b, nullptr);
  b->status = block_status::allocated;
  p.pools.free_block(a, elsewhere);
  block* small = p.range.grow(4 * MiB, pool);  // too small for large pages: new pages
  ASSERT_NE(small, nullptr);
  small->status = block_status::allocated;
  EXPECT_EQ(p.range.moves_in_flight(), 0U);
  EXPECT_EQ(p.reserved.bytes(), 306 * MiB);
  // 270 MiB at 306: fourteen large pages move ([20, 300)), twelve map whole
  // at [320, 560), the other two are let go; [306, 320) and [560, 576) are new pages.
  block* grown = p.range.grow(270 * MiB, pool);
  ASSERT_NE(grown, nullptr);
  EXPECT_EQ(grown->ptr, p.range.range()->base + 306 * MiB);
  EXPECT_EQ(p.range.moves_in_flight(), 1U);
  EXPECT_EQ(p.reserved.bytes(), (306 + 30) * MiB);  // the two let go still count
  expect_usable(s, grown);
  grown->status = block_status::allocated;
  // As empty_cache with nothing free: the move settles, the two go back.
  EXPECT_EQ(p.range.reclaim(0, /*keep_handles=*/false), 40 * MiB);
  EXPECT_EQ(p.range.moves_in_flight(), 0U);
  EXPECT_EQ(p.reserved.bytes(), (306 + 30 - 40) * MiB);  // the two large pages went with their old place
  expect_usable(s, grown);
}

// grow_from_idle maps a hole whole when that joins the pool's free blocks on
// both sides into enough: fewer pages than extending the block before it.
TEST(GrowableRange, GrowFromIdleMapsAHoleWholeToJoinFreeBlocksOnBothSides) {
  parts p{true, true, true};  // 2 MiB pages
  stream s{device};
  stream_pool& pool = p.pools.pool_for(s.view().handle());
  ASSERT_TRUE(p.range.ready());
  const std::uintptr_t base = p.range.range()->base;
  block* a = p.range.grow(3 * MiB, pool);  // [0, 3), [3, 4) free
  ASSERT_NE(a, nullptr);
  a->status = block_status::allocated;
  block* m = p.range.grow(8 * MiB, pool);  // [3, 11), [11, 12) free
  ASSERT_NE(m, nullptr);
  m->status = block_status::allocated;
  block* c = p.range.grow(2 * MiB, pool);  // [11, 13), [13, 14) free
  ASSERT_NE(c, nullptr);
  c->status = block_status::allocated;
  p.pools.free_block(m, pool);
  // m's whole pages go: [3, 4) free, [4, 10) unmapped, [10, 11) free.
  ASSERT_EQ(p.range.reclaim(64 * MiB, /*keep_handles=*/false), 6 * MiB);
  const std::size_t reserved = p.reserved.bytes();
  ASSERT_EQ(reserved, 8 * MiB);
  // 7.5 MiB: 1 + 6 + 1 MiB around the hole, three pages; extending [13, 14)
  // at the top would map four.
  block* grown = p.range.grow(7 * MiB + MiB / 2, pool);
  ASSERT_NE(grown, nullptr);
  EXPECT_EQ(grown->ptr, base + 3 * MiB);
  EXPECT_EQ(p.reserved.bytes(), reserved + 6 * MiB);
  expect_usable(s, grown);
  expect_usable(s, a);
}

// Pages larger than the granularity (2 MiB on the emulated device), rounded up
// to a multiple of it: growth maps, and reclaim unmaps, whole such pages.
TEST(GrowableRange, PagesOfAChosenSizeRoundedToTheGranularity) {
  parts p{true, true, true, 5 * MiB};  // 6 MiB pages
  two_streams streams{p};
  auto& [s, other, pool, elsewhere] = streams;
  ASSERT_TRUE(p.range.ready());
  block* a = p.range.grow(3 * MiB, pool);  // [0, 3) of the first page
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(p.reserved.bytes(), 6 * MiB);
  a->status = block_status::allocated;
  block* b = p.range.grow(7 * MiB, pool);  // [3, 10): the rest of the first page and one more
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->ptr, a->end());
  EXPECT_EQ(p.reserved.bytes(), 12 * MiB);
  expect_usable(s, a);
  expect_usable(s, b);
  p.pools.free_block(b, pool);                  // [3, 12) free: only the second page wholly
  block* c = p.range.grow(6 * MiB, elsewhere);  // grow_from_idle moves that page, and no more
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(p.reserved.bytes(), 12 * MiB);
  EXPECT_EQ(p.reserved.peak(), 12 * MiB);
  EXPECT_EQ((c->ptr - p.range.range()->base) % (6 * MiB), 0U);
  expect_usable(other, c);
  expect_usable(s, a);
  p.pools.free_block(c, elsewhere);
  // c's page goes back; [3, 6) stays, as it shares a page with a.
  EXPECT_EQ(p.range.reclaim(64 * MiB, /*keep_handles=*/false), 6 * MiB);
  EXPECT_EQ(p.reserved.bytes(), 6 * MiB);
  EXPECT_TRUE(p.range.has_mapped_pages());
}

// Large pages (20 MiB here) fill the aligned bulk of a growth of 256 MiB or
// more, as one physical allocation each: reclaim then unmaps a whole one. A
// smaller growth, or no large pages, maps pages only.
TEST(GrowableRange, LargePagesMapTheBulkOfABigGrowth) {
  struct run {
    std::size_t large_page;
    std::size_t grown;
    std::size_t unmapped;  // by asking reclaim for one page
  };
  for (const run r :
       {run{20 * MiB, 300 * MiB, 20 * MiB}, run{0, 300 * MiB, 2 * MiB}, run{20 * MiB, 254 * MiB, 2 * MiB}}) {
    parts p{true, false, false, 0, r.large_page};
    stream s{device};
    stream_pool& pool = p.pools.pool_for(s.view().handle());
    ASSERT_TRUE(p.range.ready());
    EXPECT_EQ(p.range.large_page_size(), r.large_page);
    block* a = p.range.grow(r.grown, pool);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(p.reserved.bytes(), r.grown);
    const bool large = r.unmapped > 2 * MiB;  // the others only show the difference: other tests fill pages
    if (large) expect_usable(s, a);
    p.pools.free_block(a, pool);
    EXPECT_EQ(p.range.reclaim(2 * MiB, /*keep_handles=*/false), r.unmapped) << r.large_page << " " << r.grown;
    EXPECT_EQ(p.reserved.bytes(), r.grown - r.unmapped);
    block* again = p.range.grow(r.grown, pool);  // the top mapped again, the rest reused
    ASSERT_NE(again, nullptr);
    EXPECT_EQ(again->ptr, p.range.range()->base);
    EXPECT_EQ(p.reserved.bytes(), r.grown);
    if (large) expect_usable(s, again);
  }
}

// A large page moves only when all of it is idle: with grow_from_idle, the
// free part of one that a block still uses stays where it is, and the wholly
// idle ones move as they are into a growth of another stream.
TEST(GrowableRange, ALargePageMovesOnlyWhenAllOfItIsIdle) {
  parts p{true, true, true, 0, 20 * MiB};
  two_streams streams{p};
  auto& [s, other, pool, elsewhere] = streams;
  ASSERT_TRUE(p.range.ready());
  const std::uintptr_t base = p.range.range()->base;
  block* a = p.range.grow(300 * MiB, elsewhere);  // fifteen large pages
  ASSERT_NE(a, nullptr);
  p.pools.free_block(a, elsewhere);
  block* kept = p.range.grow(30 * MiB, elsewhere);  // [0, 30): the first large page and half the second
  ASSERT_NE(kept, nullptr);
  ASSERT_EQ(kept->ptr, base);
  kept->status = block_status::allocated;
  expect_usable(other, kept);
  // 270 MiB on the other stream: [40, 300) moves (thirteen large pages) to
  // the top, 10 MiB are new.
  block* grown = p.range.grow(270 * MiB, pool);
  ASSERT_NE(grown, nullptr);
  EXPECT_EQ(p.reserved.bytes(), 310 * MiB);
  EXPECT_EQ(p.reserved.peak(), 310 * MiB);
  EXPECT_EQ(grown->ptr, base + 300 * MiB);
  ASSERT_NE(block_at(p, base + 40 * MiB), nullptr);
  EXPECT_EQ(block_at(p, base + 40 * MiB)->status, block_status::moving);
  EXPECT_EQ(block_at(p, base + 40 * MiB)->size, 260 * MiB);
  ASSERT_NE(kept->next, nullptr);  // [30, 40) stays free and mapped, beside the block in use
  EXPECT_EQ(kept->next->status, block_status::free);
  EXPECT_EQ(kept->next->ptr, base + 30 * MiB);
  EXPECT_EQ(kept->next->size, 10 * MiB);
  expect_usable(s, grown);
  expect_usable(other, kept);
}

TEST(GrowableRange, TheLimitRefusesABigGrowthWhole) {
  parts p{true, false, false, 0, 20 * MiB};
  p.reserved.set_limit(290 * MiB);
  stream s{device};
  stream_pool& pool = p.pools.pool_for(s.view().handle());
  expect_refused(p, pool, 300 * MiB);
  block* a = p.range.grow(280 * MiB, pool);  // within the limit: large pages and pages
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(p.reserved.bytes(), 280 * MiB);
  expect_usable(s, a);
}

}  // namespace
}  // namespace syncmem::mr::detail::caching
