// mr::pool: a pool of its own, whose statistics and snapshot count only what
// was allocated from it, that can be emptied, never splits when asked, keeps
// to its limit, and counts in another resource when asked; on both kinds of
// device.
#include "syncmem/mr/pool.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

namespace syncmem::test {
namespace {

template <class Kind>
class Pools : public device_test<Kind> {};
TYPED_TEST_SUITE(Pools, device_kinds, device_kind_names);

bool in_snapshot(const mr::allocator_snapshot& s, const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (const auto& seg : s.segments) {
    if (a >= seg.address && a < seg.address + seg.size) return true;
  }
  return false;
}

TYPED_TEST(Pools, StatisticsAndSnapshotAreItsOwn) {
  mr::pool p{this->dev()};
  stream s{this->dev()};
  auto* ordinary = dynamic_cast<mr::caching_resource*>(&mr::get_per_device_resource(this->dev()));
  ASSERT_NE(ordinary, nullptr) << "the default resource is a caching_resource";
  const auto before = ordinary->statistics();
  std::vector<std::pair<void*, std::size_t>> blocks;
  std::size_t total = 0;
  for (int i = 0; i < 5; ++i) {
    const std::size_t n = 4096 + rng()() % (std::size_t{3} << 20);
    blocks.emplace_back(p.resource().allocate(n, s), n);
    total += n;
  }
  // The memory is usable: a pattern written and read back in stream order.
  device_fill_pattern(s, blocks[0].first, blocks[0].second, 7);
  const auto back = read_device(s, blocks[0].first, blocks[0].second);
  for (std::size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], pattern_byte(7, i)) << "byte " << i;

  const auto stats = p.statistics();
  EXPECT_EQ(stats.live_allocations, 5u);
  EXPECT_EQ(stats.requested_bytes, total);
  EXPECT_EQ(ordinary->statistics().live_allocations, before.live_allocations);
  EXPECT_EQ(ordinary->statistics().allocations, before.allocations);
  const auto mine = p.snapshot();
  const auto theirs = ordinary->snapshot();
  for (const auto& [q, n] : blocks) {
    EXPECT_TRUE(in_snapshot(mine, q));
    EXPECT_FALSE(in_snapshot(theirs, q));
  }
  for (const auto& [q, n] : blocks) p.resource().deallocate(q, n, s);
  EXPECT_EQ(p.statistics().live_allocations, 0u);
  EXPECT_GT(p.statistics().reserved_bytes, 0u);
  p.empty_cache();
  EXPECT_EQ(p.statistics().reserved_bytes, 0u) << "an emptied pool holds nothing";
  EXPECT_TRUE(p.snapshot().segments.empty());
}

// A large free block is cut for a smaller request in an ordinary pool, never
// in a pool that never splits.
TYPED_TEST(Pools, NeverSplitKeepsLargeBlocksWhole) {
  stream s{this->dev()};
  const std::size_t big = std::size_t{48} << 20, small = std::size_t{6} << 20;
  for (const bool never : {false, true}) {
    mr::pool p{this->dev(), {.never_split = never}};
    void* a = p.resource().allocate(big, s);
    p.resource().deallocate(a, big, s);
    void* b = p.resource().allocate(small, s);
    const auto stats = p.statistics();
    if (never) {
      EXPECT_EQ(stats.splits, 0u);
      EXPECT_NE(b, a) << "a large block was cut for a small request";
      EXPECT_EQ(stats.segments, 2u);
    } else {
      EXPECT_GT(stats.splits, 0u);
      EXPECT_EQ(b, a);
    }
    p.resource().deallocate(b, small, s);
  }
}

TYPED_TEST(Pools, KeepsToItsLimit) {
  stream s{this->dev()};
  mr::pool p{this->dev(), {.limit = std::size_t{8} << 20}};
  void* a = p.resource().allocate(std::size_t{4} << 20, s);
  EXPECT_THROW((void)p.resource().allocate(std::size_t{16} << 20, s), out_of_memory);
  p.resource().deallocate(a, std::size_t{4} << 20, s);
}

// The pool's own resource takes the options given (the growable range here),
// with never_split and limit applied over them.
TYPED_TEST(Pools, ItsResourceTakesTheCachingOptionsGiven) {
  stream s{this->dev()};
  mr::caching_options growable;
  growable.expandable = true;
  growable.limit = std::size_t{64} << 20;
  mr::pool p{this->dev(), {.never_split = true, .caching = growable}};
  EXPECT_TRUE(p.resource().options().expandable);
  EXPECT_EQ(p.resource().options().limit, growable.limit) << "no limit of the pool's own: the options' stays";
  EXPECT_EQ(p.resource().options().max_split_size, std::size_t{1} << 20) << "never_split applies over the options";
  const std::size_t n = std::size_t{3} << 20;
  void* a = p.resource().allocate(n, s);
  const auto snap = p.snapshot();
  ASSERT_EQ(snap.segments.size(), 1u);
  EXPECT_EQ(snap.segments[0].pool, mr::segment_pool::expandable);
  p.resource().deallocate(a, n, s);
  mr::pool limited{this->dev(), {.limit = std::size_t{8} << 20, .caching = growable}};
  EXPECT_EQ(limited.resource().options().limit, std::size_t{8} << 20) << "the pool's limit wins";
}

// With counts_in, what the pool reserves and hands out shows in the other
// resource's statistics too (as a MemPool's in torch.cuda.memory_stats), its
// growth stays within that one's limit, and it all goes when the pool does.
TYPED_TEST(Pools, CountsInAnotherResourcesStatisticsAndLimit) {
  stream s{this->dev()};
  for (const bool growable : {false, true}) {
    SCOPED_TRACE(growable ? "growable range" : "plain segments");
    mr::caching_options o;
    o.expandable = growable;
    mr::caching_resource device{this->dev(), o};
    const std::size_t own_bytes = 4096 + rng()() % (std::size_t{2} << 20);
    void* own = device.allocate(own_bytes, s);
    const auto before = device.statistics();
    std::size_t own_reserved = before.reserved_bytes;
    {
      mr::pool p{this->dev(), {.counts_in = &device, .caching = o}};
      EXPECT_EQ(p.resource().options().thread_cache_size, 0u) << "no per-thread caches: every block counted at once";
      std::vector<std::pair<void*, std::size_t>> blocks;
      for (int i = 0; i < 6; ++i) {
        const std::size_t n = 512 + rng()() % (std::size_t{6} << 20);
        blocks.emplace_back(p.resource().allocate(n, s), n);
      }
      device_fill_pattern(s, blocks.back().first, blocks.back().second, 11);
      const auto back = read_device(s, blocks.back().first, blocks.back().second);
      for (std::size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], pattern_byte(11, i)) << "byte " << i;
      const auto mine = p.statistics();
      auto both = device.statistics();
      EXPECT_EQ(both.allocated_bytes, before.allocated_bytes + mine.allocated_bytes);
      EXPECT_EQ(both.requested_bytes, before.requested_bytes + mine.requested_bytes);
      EXPECT_EQ(both.live_allocations, before.live_allocations + 6);
      EXPECT_EQ(both.reserved_bytes, before.reserved_bytes + mine.reserved_bytes);
      EXPECT_GE(both.peak_reserved_bytes, both.reserved_bytes);
      EXPECT_GE(both.peak_allocated_bytes, both.allocated_bytes);

      // The other resource's limit binds the pool: nothing more past it.
      device.set_limit(both.reserved_bytes + (std::size_t{1} << 20));
      const std::size_t cached = mine.reserved_bytes - mine.allocated_bytes;
      try {
        (void)p.resource().allocate(cached + (std::size_t{64} << 20), s);
        ADD_FAILURE() << "the pool grew past the limit of the resource it counts in";
      } catch (const out_of_memory& e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr("counts_in")) << "the report does not say whose limit stopped it";
      }
      // ... and the pool's memory binds the other resource.
      EXPECT_THROW((void)device.allocate(std::size_t{64} << 20, s), out_of_memory);
      device.set_limit(std::nullopt);
      // (Out of memory, each may have given idle memory back: its own reserve now.)
      own_reserved = device.statistics().reserved_bytes - p.statistics().reserved_bytes;

      for (const auto& [q, n] : blocks) p.resource().deallocate(q, n, s);
      both = device.statistics();
      EXPECT_EQ(both.allocated_bytes, before.allocated_bytes);
      EXPECT_EQ(both.requested_bytes, before.requested_bytes);
      EXPECT_EQ(both.reserved_bytes, own_reserved + p.statistics().reserved_bytes);
      p.empty_cache();
      EXPECT_EQ(device.statistics().reserved_bytes, own_reserved) << "the pool's emptied memory still counted";
      // A block still cached when the pool goes stops counting with it.
      (void)p.resource().allocate(std::size_t{3} << 20, s);
      p.resource().deallocate(p.resource().allocate(std::size_t{1} << 20, s), std::size_t{1} << 20, s);
    }
    const auto after = device.statistics();
    EXPECT_EQ(after.reserved_bytes, own_reserved) << "a destroyed pool's memory still counted";
    EXPECT_EQ(after.allocated_bytes, before.allocated_bytes) << "a destroyed pool's live block still counted";
    EXPECT_EQ(after.live_allocations, before.live_allocations);
    device.deallocate(own, own_bytes, s);
  }
}

TYPED_TEST(Pools, CountsInOnlyAResourceOfItsDevice) {
  SYNCMEM_REQUIRE_COUNT(2);
  mr::caching_resource other{this->dev(1)};
  EXPECT_THROW((mr::pool{this->dev(), {.counts_in = &other}}), logic_error);
}

}  // namespace
}  // namespace syncmem::test
