// ctest-labels: threaded
#include "syncmem/event.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "backend/backend.hpp"
#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {
namespace {

template <class Kind>
class Events : public test::device_test<Kind> {};
TYPED_TEST_SUITE(Events, test::device_kinds, test::device_kind_names);

TYPED_TEST(Events, NeverRecordedIsReady) {
  event e{this->dev()};
  EXPECT_TRUE(e.ready());
  EXPECT_NO_THROW(e.synchronize());
  EXPECT_EQ(e.device(), this->dev());
}

TYPED_TEST(Events, RecordThenSynchronize) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  stream s{this->dev()};
  event e{this->dev()};
  test::stream_latch hold{s};
  e.record(s);
  EXPECT_FALSE(e.ready());
  hold.release();
  e.synchronize();
  EXPECT_TRUE(e.ready());
}

TYPED_TEST(Events, ReadyRefersToTheLatestRecord) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  stream busy{this->dev()};
  stream idle{this->dev()};
  event e{this->dev()};
  test::stream_latch hold{busy};
  e.record(busy);
  EXPECT_FALSE(e.ready());
  e.record(idle);
  e.synchronize();  // waits for the record on idle only
  EXPECT_TRUE(e.ready());
  EXPECT_FALSE(busy.ready());
  hold.release();
  busy.synchronize();
}

// Stream B copies what stream A writes, ordered only by an event: without the
// wait B would read the buffer before A has filled it.
TYPED_TEST(Events, StreamWaitOrdersWorkAcrossStreams) {
  test::scoped_emulated_delay delay{std::chrono::microseconds{300}};
  for (int round = 0; round < 5; ++round) {
    const std::size_t n = 4096 + test::rng()() % 4096;
    const auto seed = test::fresh_seed();
    stream a{this->dev()};
    stream b{this->dev()};
    event written{this->dev()};
    device_guard guard{this->dev()};
    auto& be = detail::backend_for(this->dev());
    void* device_buffer = be.allocate(this->dev().index(), n);
    auto* host = static_cast<std::uint8_t*>(be.allocate_pinned(n, 0));
    ASSERT_NE(device_buffer, nullptr);
    ASSERT_NE(host, nullptr);
    std::memset(host, 0, n);
    test::device_sleep(a, std::chrono::milliseconds{30});
    test::device_fill_pattern(a, device_buffer, n, seed);
    written.record(a);
    b.wait(written);
    be.memcpy_async(host, device_buffer, n, this->dev().index(), b.view().handle());
    b.synchronize();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(host[i], test::pattern_byte(seed, i)) << "round " << round;
    be.deallocate_pinned(host, n);
    be.deallocate(this->dev().index(), device_buffer, n);
  }
}

// A wait captures the record of that moment: recording the event again on an
// idle stream must not release a stream already waiting for the first record.
TYPED_TEST(Events, AWaitHoldsOnToTheRecordItSaw) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  stream slow{this->dev()};
  stream waiting{this->dev()};
  stream idle{this->dev()};
  event e{this->dev()};
  std::atomic<bool> slow_done{false};
  test::stream_latch hold{slow};
  slow.launch_host_func([&slow_done] { slow_done = true; });
  e.record(slow);
  waiting.wait(e);
  e.record(idle);  // completes at once
  std::atomic<bool> saw_slow_done{false};
  waiting.launch_host_func([&] { saw_slow_done = slow_done.load(); });
  EXPECT_TRUE(test::while_held(hold, [&] {
    waiting.synchronize();
    return saw_slow_done.load();
  }));
  slow.synchronize();
}

TYPED_TEST(Events, WaitingOnANeverRecordedEventDoesNotBlock) {
  stream s{this->dev()};
  event e{this->dev()};
  s.wait(e);
  bool ran = false;
  s.launch_host_func([&ran] { ran = true; });
  s.synchronize();
  EXPECT_TRUE(ran);
}

TYPED_TEST(Events, ElapsedTimeNeedsTimingEvents) {
  stream s{this->dev()};
  event start{this->dev(), {.timing = true}};
  event end{this->dev(), {.timing = true}};
  start.record(s);
  test::device_sleep(s, std::chrono::milliseconds{20});
  end.record(s);
  end.synchronize();
  const float ms = event::elapsed_ms(start, end);
  EXPECT_GE(ms, 10.0F);
  EXPECT_LT(ms, 5000.0F);
  event plain{this->dev()};
  EXPECT_THROW((void)event::elapsed_ms(plain, end), logic_error);
}

TYPED_TEST(Events, MoveKeepsTheHandle) {
  event a{this->dev()};
  auto handle = a.handle();
  event b{std::move(a)};
  EXPECT_EQ(b.handle(), handle);
  EXPECT_THROW((void)a.handle(), logic_error);  // NOLINT(bugprone-use-after-move)
}

TEST(EventsAcrossDevices, RecordingOnAStreamOfAnotherDeviceNamesBoth) {
  event e{device_id::emulated(0)};
  stream s{device_id::emulated(1)};
  try {
    e.record(s);
    FAIL() << "did not throw";
  } catch (const logic_error& err) {
    EXPECT_THAT(err.what(), HasSubstr("emulated:0"));
    EXPECT_THAT(err.what(), HasSubstr("emulated:1"));
  }
  try {
    s.wait(e);
    FAIL() << "did not throw";
  } catch (const logic_error& err) {
    EXPECT_THAT(err.what(), HasSubstr("emulated:0"));
    EXPECT_THAT(err.what(), HasSubstr("emulated:1"));
  }
}

TEST(EventsAcrossDevices, CudaEventAndEmulatedStream) {
  SYNCMEM_REQUIRE_DEVICES(device_kind::cuda, 1);
  event e{device_id::cuda(0)};
  stream s{device_id::emulated(0)};
  EXPECT_THROW(e.record(s), logic_error);
}

}  // namespace
}  // namespace syncmem
