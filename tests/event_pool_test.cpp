// ctest-labels: threaded
#include "core/event_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "device_ops.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

namespace syncmem {
namespace {

using detail::event_pool;

template <class Kind>
class EventPool : public test::device_test<Kind> {};
TYPED_TEST_SUITE(EventPool, test::device_kinds, test::device_kind_names);

// A CUDA event given back while pending is handed out again at once, with no
// query; an emulated one only once it has completed.
TYPED_TEST(EventPool, HandsOutAPendingEventAgainOnlyOnCuda) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  auto& pool = event_pool::instance();
  stream held{this->dev()};
  test::stream_latch hold{held};
  event e = pool.acquire(this->dev());
  e.record(held);
  ASSERT_FALSE(e.ready());
  const auto handle = e.handle();
  pool.release(std::move(e));
  event again = pool.acquire(this->dev());
  EXPECT_EQ(again.handle() == handle, this->is_cuda());
  EXPECT_EQ(again.device(), this->dev());
  hold.release();
  held.synchronize();
  pool.release_completed(std::move(again));
}

// The reuse above must leave alone a stream that waits for the first record:
// recording the event anew on an idle stream does not let it go early.
TYPED_TEST(EventPool, RecordingAReusedEventKeepsEarlierWaits) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  auto& pool = event_pool::instance();
  for (int round = 0; round < 3; ++round) {
    stream slow{this->dev()};
    stream waiting{this->dev()};
    stream idle{this->dev()};
    std::atomic<bool> slow_done{false};
    test::stream_latch hold{slow};
    slow.launch_host_func([&slow_done] { slow_done = true; });
    event first = pool.acquire(this->dev());
    first.record(slow);
    waiting.wait(first);
    pool.release(std::move(first));
    event second = pool.acquire(this->dev());
    second.record(idle);  // completes at once
    second.synchronize();
    std::atomic<bool> saw_slow_done{false};
    waiting.launch_host_func([&] { saw_slow_done = slow_done.load(); });
    EXPECT_TRUE(test::while_held(hold,
                                 [&] {
                                   waiting.synchronize();
                                   return saw_slow_done.load();
                                 }))
        << "round " << round;
    slow.synchronize();
    pool.release_completed(std::move(second));
  }
}

// Each thread keeps a few events it gave back for itself (CUDA); when it ends
// they go to the shared pool, none lost: a new thread then gets every event
// the first gave back, more than it keeps included.
TYPED_TEST(EventPool, EventsAThreadKeepsGoToThePoolWhenItEnds) {
  auto& pool = event_pool::instance();
  const device_id d = this->dev();
  constexpr std::size_t count = 6;
  auto take_and_give_back = [&pool, d] {
    std::vector<event> events;
    std::vector<event_handle> handles;
    for (std::size_t i = 0; i < count; ++i) {
      events.push_back(pool.acquire(d));
      handles.push_back(events.back().handle());
    }
    for (event& e : events) pool.release_completed(std::move(e));
    std::sort(handles.begin(), handles.end());
    return handles;
  };
  std::vector<event_handle> first;
  std::thread{[&] { first = take_and_give_back(); }}.join();
  std::vector<event_handle> second;
  std::thread{[&] { second = take_and_give_back(); }}.join();
  EXPECT_EQ(std::adjacent_find(first.begin(), first.end()), first.end()) << "an event handed out twice at once";
  EXPECT_EQ(second, first);
}

}  // namespace
}  // namespace syncmem
