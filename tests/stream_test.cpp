// ctest-labels: threaded
#include "syncmem/stream.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

#include "backend/backend.hpp"
#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {
namespace {

static_assert(!std::is_constructible_v<stream_view, int>);
static_assert(!std::is_constructible_v<stream_view, std::nullptr_t>);
static_assert(!std::is_default_constructible_v<stream_view>);
static_assert(!std::is_copy_constructible_v<stream>);
static_assert(std::is_nothrow_move_constructible_v<stream>);

// Raw device and pinned memory straight from the backend, for layer-2 tests.
struct raw_device_buffer {
  device_id device;
  std::size_t bytes;
  void* p;
  raw_device_buffer(device_id d, std::size_t n) : device{d}, bytes{n} {
    device_guard guard{d};
    p = detail::backend_for(d).allocate(d.index(), n);
    if (p == nullptr) throw std::bad_alloc{};
  }
  ~raw_device_buffer() {
    device_guard guard{device};
    detail::backend_for(device).deallocate(device.index(), p, bytes);
  }
  raw_device_buffer(const raw_device_buffer&) = delete;
  raw_device_buffer& operator=(const raw_device_buffer&) = delete;
};

struct raw_pinned_buffer {
  device_id device;
  std::size_t bytes;
  std::uint8_t* p;
  raw_pinned_buffer(device_id d, std::size_t n) : device{d}, bytes{n} {
    device_guard guard{d};
    p = static_cast<std::uint8_t*>(detail::backend_for(d).allocate_pinned(n, 0));
    if (p == nullptr) throw std::bad_alloc{};
  }
  ~raw_pinned_buffer() { detail::backend_for(device).deallocate_pinned(p, bytes); }
  raw_pinned_buffer(const raw_pinned_buffer&) = delete;
  raw_pinned_buffer& operator=(const raw_pinned_buffer&) = delete;
};

void enqueue_copy(stream_view s, void* dst, const void* src, std::size_t n) {
  device_guard guard{s.device()};
  detail::backend_for(s.device()).memcpy_async(dst, src, n, s.device().index(), s.handle());
}

template <class Kind>
class Streams : public test::device_test<Kind> {};
TYPED_TEST_SUITE(Streams, test::device_kinds, test::device_kind_names);

TYPED_TEST(Streams, HostFunctionsRunInEnqueueOrder) {
  test::scoped_emulated_delay delay{std::chrono::microseconds{200}};
  stream s{this->dev()};
  std::vector<int> order;
  constexpr int n = 100;
  for (int i = 0; i < n; ++i) s.launch_host_func([&order, i] { order.push_back(i); });
  s.synchronize();
  ASSERT_EQ(order.size(), std::size_t{n});
  for (int i = 0; i < n; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
}

TYPED_TEST(Streams, CopiesAndDeviceWorkStayInOrder) {
  test::scoped_emulated_delay delay{std::chrono::microseconds{100}};
  const std::size_t n = 1000 + test::rng()() % 5000;
  const auto seed = test::fresh_seed();
  const auto delta = static_cast<std::uint8_t>(1 + test::rng()() % 200);
  stream s{this->dev()};
  raw_device_buffer device_buffer{this->dev(), n};
  raw_pinned_buffer first{this->dev(), n};
  raw_pinned_buffer second{this->dev(), n};
  test::device_fill_pattern(s, device_buffer.p, n, seed);
  enqueue_copy(s, first.p, device_buffer.p, n);
  test::device_add_bytes(s, device_buffer.p, n, delta);
  enqueue_copy(s, second.p, device_buffer.p, n);
  s.synchronize();
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(first.p[i], test::pattern_byte(seed, i)) << "byte " << i;
    ASSERT_EQ(second.p[i], static_cast<std::uint8_t>(test::pattern_byte(seed, i) + delta)) << "byte " << i;
  }
}

TYPED_TEST(Streams, ReadyReflectsPendingWork) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  stream s{this->dev()};
  EXPECT_TRUE(s.ready());
  test::stream_latch hold{s};
  EXPECT_FALSE(s.ready());
  hold.release();
  s.synchronize();
  EXPECT_TRUE(s.ready());
}

TYPED_TEST(Streams, DefaultStreamBelongsToItsDevice) {
  for (int i = 0; i < this->count(); ++i) {
    const auto d = default_stream(this->dev(i));
    EXPECT_EQ(d.device(), this->dev(i));
    EXPECT_TRUE(d.is_default());
    EXPECT_EQ(d, default_stream(this->dev(i)));
    d.synchronize();
  }
  stream own{this->dev()};
  EXPECT_FALSE(own.view().is_default());
  EXPECT_NE(own.view(), default_stream(this->dev()));
  EXPECT_EQ(own.device(), this->dev());
}

TYPED_TEST(Streams, MovedFromStreamRefusesUse) {
  stream a{this->dev()};
  const auto view = a.view();
  stream b{std::move(a)};
  EXPECT_EQ(b.view(), view);
  EXPECT_THROW((void)a.view(), logic_error);  // NOLINT(bugprone-use-after-move)
  stream c{this->dev()};
  c = std::move(b);
  EXPECT_EQ(c.view(), view);
  c.synchronize();
}

TYPED_TEST(Streams, DestroyingAStreamWaitsForItsWorkAndEndsItsLiveness) {
  bool ran = false;
  std::weak_ptr<void> alive;
  {
    stream s{this->dev()};
    alive = detail::stream_liveness(s);
    EXPECT_FALSE(alive.expired());
    test::device_sleep(s, std::chrono::milliseconds{50});
    s.launch_host_func([&ran] { ran = true; });
  }
  EXPECT_TRUE(ran);
  EXPECT_TRUE(alive.expired());
  // Streams syncmem does not own have no token (an empty one): they are assumed alive.
  EXPECT_TRUE(detail::stream_liveness(default_stream(this->dev())).expired());
}

// A remembered stream is its handle and its liveness: a new stream that gets
// the handle of a destroyed one is not it.
TYPED_TEST(Streams, AnIdentityTellsANewStreamFromADestroyedOneWithItsHandle) {
  detail::stream_identity id;
  EXPECT_FALSE(id.usable());
  stream_handle dead{};
  {
    stream a{this->dev()};
    id.remember(a);
    EXPECT_TRUE(id.usable());
    EXPECT_TRUE(id.is(a));
    EXPECT_EQ(id.view(), a.view());
    dead = a.view().handle();
  }
  EXPECT_FALSE(id.usable());
  stream b{this->dev()};
  EXPECT_FALSE(id.is(b)) << (b.view().handle() == dead ? "b got a's handle" : "b got a new handle");
  id.remember(b);
  EXPECT_TRUE(id.is(b));
  EXPECT_FALSE(id.is(default_stream(this->dev())));
  // Streams syncmem does not own are told by handle, and assumed alive.
  id.remember(default_stream(this->dev()));
  EXPECT_TRUE(id.usable());
  EXPECT_TRUE(id.is(default_stream(this->dev())));
  id.forget();
  EXPECT_FALSE(id.usable());
  EXPECT_FALSE(id.is(default_stream(this->dev())));
}

TYPED_TEST(Streams, ManyThreadsManyStreams) {
  test::scoped_emulated_delay delay{std::chrono::microseconds{20}};
  constexpr int threads = 4;
  std::vector<std::thread> workers;
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        const auto device = this->dev(t % this->count());
        stream s{device};
        int counter = 0;
        for (int i = 0; i < 50; ++i)
          s.launch_host_func([&counter, i] {
            if (counter != i) throw std::runtime_error{"out of order"};
            ++counter;
          });
        s.synchronize();
        if (counter != 50) throw std::runtime_error{"lost work"};
      } catch (const std::exception& e) {
        std::lock_guard lock{failures_mutex};
        failures.push_back(e.what());
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_TRUE(failures.empty()) << failures.front();
}

TEST(EmulatedStreams, AnExceptionInAHostFunctionIsReportedBySynchronize) {
  stream s{device_id::emulated(0)};
  s.launch_host_func([] { throw std::runtime_error{"boom in stream order"}; });
  try {
    s.synchronize();
    FAIL() << "did not throw";
  } catch (const logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("boom in stream order"));
  }
  EXPECT_NO_THROW(s.synchronize());  // reported once
}

TEST(EmulatedStreams, EmptyHostFunctionIsRefused) {
  stream s{device_id::emulated(0)};
  EXPECT_THROW(s.launch_host_func({}), logic_error);
}

TEST(EmulatedStreams, StreamsOfTwoDevicesRunIndependently) {
  SYNCMEM_REQUIRE_STREAM_HOLDS();
  stream slow{device_id::emulated(0)};
  stream fast{device_id::emulated(1)};
  test::stream_latch hold{slow};
  bool ran = false;
  fast.launch_host_func([&ran] { ran = true; });
  fast.synchronize();
  EXPECT_TRUE(ran);
  EXPECT_FALSE(slow.ready());
  hold.release();
  slow.synchronize();
}

}  // namespace
}  // namespace syncmem
