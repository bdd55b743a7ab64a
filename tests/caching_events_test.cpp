// The caching allocator's events, on an emulated device.
#include "mr/caching/caching_events.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include "device_ops.hpp"
#include "memory_pattern.hpp"
#include "syncmem/mr/emulated_resource.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

namespace syncmem::mr::detail::caching {
namespace {

using namespace std::chrono_literals;
using syncmem::test::fresh_seed;

const device_id device = device_id::emulated(0);

TEST(CachingEvents, EventsAreRecycled) {
  caching_events events{device};
  event_handle e = events.get();
  EXPECT_EQ(events.made(), 1U);
  events.put(e);
  EXPECT_EQ(events.get(), e);
  event_handle f = events.get();
  EXPECT_NE(f, e);
  EXPECT_EQ(events.made(), 2U);
  events.put(e);
  events.put(f);
  events.put(event_handle{});  // ignored
  (void)events.get();
  (void)events.get();
  EXPECT_EQ(events.made(), 2U);
  events.destroy_all();
  EXPECT_EQ(events.made(), 0U);
}

TEST(CachingEvents, AnEventPassesWhenTheWorkBeforeItIsDone) {
  caching_events events{device};
  stream s{device};
  EXPECT_TRUE(events.passed(event_handle{}));
  syncmem::test::device_sleep(s, 50ms);
  event_handle e = events.record_on(s.view().handle());
  EXPECT_FALSE(events.passed(e));
  events.synchronize(e);
  EXPECT_TRUE(events.passed(e));
  events.put(e);
  events.destroy_all();
}

TEST(CachingEvents, OrderAfterMakesAStreamWaitForAnother) {
  caching_events events{device};
  emulated_resource memory{device};
  stream first{device};
  stream second{device};
  const std::size_t bytes = 1 << 16;
  void* p = memory.allocate(bytes, first);
  syncmem::test::device_sleep(first, 30ms);
  syncmem::test::device_fill_pattern(first, p, bytes, fresh_seed());
  events.order_after(first.view().handle(), second.view().handle());
  const auto seed = fresh_seed();
  syncmem::test::device_fill_pattern(second, p, bytes, seed);
  synchronize_device(device);
  EXPECT_TRUE(syncmem::test::holds_pattern(memory_kind::device, second, p, bytes, seed));
  memory.deallocate(p, bytes, second);
  events.destroy_all();
}

}  // namespace
}  // namespace syncmem::mr::detail::caching
