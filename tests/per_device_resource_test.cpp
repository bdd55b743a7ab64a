// The default resource of each device: the built-in caching resource, the
// options it is made with, and replacing it. The options are the process's,
// so the test of them comes first, before any built-in resource is made.
#include "syncmem/mr/per_device_resource.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "syncmem/device.hpp"
#include "syncmem/error.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

namespace syncmem::test {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Built-in resources made after set_default_caching_options() take its
// options under SYNCMEM_ALLOC_CONF's keys; those made before keep theirs and
// are the devices it returns.
TEST(PerDeviceResource, BuiltInResourcesTakeTheDefaultOptionsSetBeforeThem) {
  if (std::getenv("SYNCMEM_ALLOC_CONF") != nullptr)
    GTEST_SKIP() << "SYNCMEM_ALLOC_CONF is set: it would change every option compared here";
  const int count = device_count(device_kind::emulated);
  ASSERT_GE(count, 2);
  const device_id early = device_id::emulated(static_cast<int>(rng()() % static_cast<unsigned>(count)));
  EXPECT_EQ(mr::default_resource(early).options(), mr::caching_options{});

  mr::caching_options first;
  first.thread_cache_size = (1 + rng()() % 64) * MiB;
  first.grow_from_idle = true;
  first.expandable = true;
  EXPECT_EQ(mr::set_default_caching_options(first), std::vector<device_id>{early});
  EXPECT_EQ(mr::default_resource(early).options(), mr::caching_options{}) << "a resource made before changed";
  for (int i = 0; i < count; ++i) {
    if (device_id::emulated(i) == early) continue;
    EXPECT_EQ(mr::default_resource(device_id::emulated(i)).options(), first) << to_string(device_id::emulated(i));
  }

  // Setting them again: every device but `early` already has them.
  EXPECT_EQ(mr::set_default_caching_options(first), std::vector<device_id>{early});
  std::vector<device_id> others;
  for (int i = 0; i < count; ++i) {
    if (device_id::emulated(i) != early) others.push_back(device_id::emulated(i));
  }
  EXPECT_EQ(mr::set_default_caching_options(mr::caching_options{}), others);

  // A malformed SYNCMEM_ALLOC_CONF is an error naming it, and leaves the base.
  ::setenv("SYNCMEM_ALLOC_CONF", "grow_from_idle:maybe", 1);
  EXPECT_THROW((void)mr::set_default_caching_options(first), logic_error);
  ::unsetenv("SYNCMEM_ALLOC_CONF");
  EXPECT_EQ(mr::set_default_caching_options(mr::caching_options{}), others) << "the failed call changed the base";
}

TEST(PerDeviceResource, IsTheBuiltInCachingResourceOfEveryDevice) {
  for (int i = 0; i < device_count(device_kind::emulated); ++i) {
    mr::caching_resource& r = mr::default_resource(device_id::emulated(i));
    EXPECT_EQ(&r, &mr::get_per_device_resource(device_id::emulated(i)));
    EXPECT_EQ(r.device(), device_id::emulated(i));
  }
  EXPECT_THROW((void)mr::default_resource(device_id::emulated(9)), logic_error);
}

// Its statistics count what the defaults hand out, with no cast; a replaced
// default leaves it reachable and unchanged.
TEST(PerDeviceResource, TheDefaultPoolIsReachableTyped) {
  const auto device = device_id::emulated(1);
  mr::caching_resource& pool = mr::default_resource(device);
  const auto before = pool.statistics();
  const std::size_t bytes = 4096 + test::rng()() % 4096;
  auto s = default_stream(device);
  void* p = mr::get_per_device_resource(device).allocate(bytes, s);
  EXPECT_EQ(pool.statistics().requested_bytes, before.requested_bytes + bytes);
  EXPECT_EQ(pool.statistics().live_allocations, before.live_allocations + 1);
  mr::caching_resource second{device};  // a pool of its own, on purpose
  EXPECT_NE(&second, &pool);
  mr::memory_resource* previous = mr::set_per_device_resource(device, &second);
  EXPECT_EQ(previous, &pool);
  EXPECT_EQ(&mr::get_per_device_resource(device), &second);
  EXPECT_EQ(&mr::default_resource(device), &pool);
  void* q = mr::get_per_device_resource(device).allocate(bytes, s);
  EXPECT_EQ(second.statistics().live_allocations, 1U);
  EXPECT_EQ(pool.statistics().live_allocations, before.live_allocations + 1);
  second.deallocate(q, bytes, s);
  mr::set_per_device_resource(device, nullptr);
  EXPECT_EQ(&mr::get_per_device_resource(device), &pool);
  pool.deallocate(p, bytes, s);
  EXPECT_EQ(pool.statistics().live_allocations, before.live_allocations);
}

}  // namespace
}  // namespace syncmem::test
