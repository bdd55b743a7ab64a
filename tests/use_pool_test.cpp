// ctest-labels: threaded
// mr::use_pool: a scope routes its thread's allocations through any caching
// resource of the device (the default one, synced_memory's) to a pool; other
// threads are routed only when handed the pool; frees go back to the pool
// from anywhere; scopes nest; a pool used on out of memory only is a reserve.
#include "syncmem/mr/use_pool.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/stream.hpp"
#include "syncmem/synced_memory.hpp"
#include "test_support.hpp"

namespace syncmem::test {
namespace {

template <class Kind>
class UsePool : public device_test<Kind> {};
TYPED_TEST_SUITE(UsePool, device_kinds, device_kind_names);

TYPED_TEST(UsePool, RoutesOnlyTheThreadsThatUseIt) {
  mr::pool p{this->dev()};
  mr::memory_resource* ordinary = &mr::get_per_device_resource(this->dev());
  stream s{this->dev()};
  const std::size_t n = 100'003;
  void* in_scope = nullptr;
  void* other_thread = nullptr;
  void* handed = nullptr;
  {
    mr::use_pool scope{p};
    EXPECT_EQ(mr::use_pool::current(this->dev()), &p);
    in_scope = ordinary->allocate(n, s);
    EXPECT_EQ(p.statistics().live_allocations, 1u);
    device_fill_pattern(s, in_scope, n, 11);
    const auto back = read_device(s, in_scope, n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], pattern_byte(11, i)) << "byte " << i;

    mr::pool* seen = &p;
    std::thread plain{[&] {
      seen = mr::use_pool::current(this->dev());
      other_thread = ordinary->allocate(n, default_stream(this->dev()));
    }};
    plain.join();
    EXPECT_EQ(seen, nullptr) << "the routing must not follow to another thread by itself";
    EXPECT_EQ(p.statistics().live_allocations, 1u) << "another thread's allocation went to the pool";

    mr::pool* given = mr::use_pool::current(this->dev());
    std::thread worker{[&] {
      mr::use_pool same{*given};
      handed = ordinary->allocate(n, default_stream(this->dev()));
    }};
    worker.join();
    EXPECT_EQ(p.statistics().live_allocations, 2u) << "a thread handed the pool allocates from it";
  }
  EXPECT_EQ(mr::use_pool::current(this->dev()), nullptr);
  void* after = ordinary->allocate(n, s);
  EXPECT_EQ(p.statistics().live_allocations, 2u) << "the scope is over";
  // Frees through the resource that allocated, out of the scope, on another thread too.
  std::thread freer{[&] { ordinary->deallocate(handed, n, default_stream(this->dev())); }};
  freer.join();
  ordinary->deallocate(in_scope, n, s);
  EXPECT_EQ(p.statistics().live_allocations, 0u) << "routed blocks go back to their pool";
  EXPECT_EQ(p.statistics().deallocations, 2u);
  ordinary->deallocate(other_thread, n, default_stream(this->dev()));
  ordinary->deallocate(after, n, s);
  s.synchronize();
}

// allocation_info through the resource that allocated a routed block answers
// what the pool holds; once freed, neither knows it.
TYPED_TEST(UsePool, AllocationInfoFollowsARoutedBlockToItsPool) {
  mr::pool p{this->dev()};
  mr::caching_resource& ordinary = mr::default_resource(this->dev());
  stream s{this->dev()};
  const std::size_t n = 1 + rng()() % (3 << 20);
  void* routed = nullptr;
  {
    mr::use_pool scope{p};
    routed = ordinary.allocate(n, s);
  }
  void* plain = ordinary.allocate(n, s);
  const auto via_resource = ordinary.allocation_info(routed);
  const auto via_pool = p.resource().allocation_info(routed);
  ASSERT_TRUE(via_resource.has_value());
  ASSERT_TRUE(via_pool.has_value());
  EXPECT_EQ(via_resource->requested_bytes, n);
  EXPECT_EQ(via_resource->block_bytes, via_pool->block_bytes);
  EXPECT_EQ(via_resource->block_bytes, p.statistics().allocated_bytes) << "the pool holds it";
  EXPECT_EQ(via_resource->stream, stream_view{s});
  EXPECT_EQ(via_pool->stream, stream_view{s});
  EXPECT_EQ(p.resource().allocation_info(plain), std::nullopt) << "not the pool's";
  ASSERT_TRUE(ordinary.allocation_info(plain).has_value());
  EXPECT_EQ(ordinary.allocation_info(plain)->requested_bytes, n);
  ordinary.deallocate(routed, n, s);
  EXPECT_EQ(ordinary.allocation_info(routed), std::nullopt);
  EXPECT_EQ(p.resource().allocation_info(routed), std::nullopt);
  ordinary.deallocate(plain, n, s);
  s.synchronize();
}

TYPED_TEST(UsePool, SyncedMemoryInAScopeTakesItsDeviceSideFromThePool) {
  mr::pool p{this->dev()};
  const std::size_t n = 65'537;
  {
    mr::use_pool scope{p};
    synced_memory m{n, this->dev(), {.label = "scoped"}};
    (void)m.device_data();
    EXPECT_EQ(p.statistics().live_allocations, 1u);
    EXPECT_GE(p.statistics().allocated_bytes, n);
  }
  EXPECT_EQ(p.statistics().live_allocations, 0u) << "the buffer's free went back to the pool";
}

TYPED_TEST(UsePool, ScopesNestAndTheInnermostWins) {
  mr::pool outer{this->dev()}, inner{this->dev()};
  mr::memory_resource* ordinary = &mr::get_per_device_resource(this->dev());
  stream s{this->dev()};
  mr::use_pool a{outer};
  void* x = nullptr;
  void* y = nullptr;
  {
    mr::use_pool b{inner};
    EXPECT_EQ(mr::use_pool::current(this->dev()), &inner);
    x = ordinary->allocate(4096, s);
    y = outer.resource().allocate(4096, s);  // a pool's own resource is never routed elsewhere
  }
  EXPECT_EQ(mr::use_pool::current(this->dev()), &outer);
  void* z = ordinary->allocate(4096, s);
  EXPECT_EQ(inner.statistics().live_allocations, 1u);
  EXPECT_EQ(outer.statistics().live_allocations, 2u);
  ordinary->deallocate(x, 4096, s);
  outer.resource().deallocate(y, 4096, s);
  ordinary->deallocate(z, 4096, s);
  EXPECT_EQ(inner.statistics().live_allocations, 0u);
  EXPECT_EQ(outer.statistics().live_allocations, 0u);
}

// A pool used on out of memory only: allocations go to the ordinary resource
// while it has room, and to the pool when it runs out.
TYPED_TEST(UsePool, APoolForOutOfMemoryOnlyIsAReserve) {
  mr::caching_resource ordinary{this->dev(), {.limit = std::size_t{8} << 20}};
  mr::pool reserve{this->dev(), {.use_on_oom_only = true}};
  stream s{this->dev()};
  const std::size_t small = std::size_t{4} << 20, big = std::size_t{16} << 20;
  mr::use_pool scope{reserve};
  void* a = ordinary.allocate(small, s);
  EXPECT_EQ(reserve.statistics().live_allocations, 0u);
  EXPECT_EQ(ordinary.statistics().live_allocations, 1u);
  void* b = ordinary.allocate(big, s);
  EXPECT_EQ(reserve.statistics().live_allocations, 1u) << "out of memory: the reserve serves it";
  device_fill_pattern(s, b, big, 3);
  const auto back = read_device(s, b, big);
  for (std::size_t i = 0; i < big; i += 4093) ASSERT_EQ(back[i], pattern_byte(3, i)) << "byte " << i;
  ordinary.deallocate(b, big, s);
  EXPECT_EQ(reserve.statistics().live_allocations, 0u);
  ordinary.deallocate(a, small, s);
  EXPECT_EQ(ordinary.statistics().live_allocations, 0u);
}

}  // namespace
}  // namespace syncmem::test
