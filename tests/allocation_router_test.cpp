// ctest-labels: threaded
// The allocation router: one list of routes that captures, mr::use_pool
// scopes and PyTorch's pools register into. A scope routes only its own
// thread on its own device, scopes nest (the innermost wins, ending one out of
// order is reported), a capture comes before any scope, and a filter routes
// the streams it accepts, from any thread.
#include "core/allocation_router.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <thread>

#include "syncmem/device.hpp"
#include "syncmem/mr/pool.hpp"
#include "syncmem/stream.hpp"
#include "test_support.hpp"

namespace syncmem::test {
namespace {

using detail::add_thread_route;
using detail::find_route;
using detail::remove_thread_route;
using detail::thread_route;

template <class Kind>
class AllocationRouter : public device_test<Kind> {};
TYPED_TEST_SUITE(AllocationRouter, device_kinds, device_kind_names);

TYPED_TEST(AllocationRouter, NothingIsRoutedWithoutARoute) {
  stream s{this->dev()};
  EXPECT_FALSE(find_route(s).has_value());
  EXPECT_FALSE(find_route(default_stream(this->dev())).has_value());
  EXPECT_EQ(thread_route(this->dev()), nullptr);
}

TYPED_TEST(AllocationRouter, AScopeRoutesOnlyItsThreadOnItsDevice) {
  mr::pool p{this->dev(), mr::pool_options{.use_on_oom_only = true}};
  stream s{this->dev()};
  const auto number = add_thread_route(this->dev(), &p, true);
  const auto here = find_route(s);
  ASSERT_TRUE(here.has_value());
  EXPECT_EQ(here->pool, &p);
  EXPECT_TRUE(here->on_oom_only);
  EXPECT_FALSE(here->capture.has_value());
  EXPECT_EQ(thread_route(this->dev()), &p);

  std::optional<detail::route_match> elsewhere{detail::route_match{}};
  mr::pool* current_elsewhere = &p;
  std::thread other{[&] {
    elsewhere = find_route(s);
    current_elsewhere = thread_route(this->dev());
  }};
  other.join();
  EXPECT_FALSE(elsewhere.has_value()) << "a scope routed another thread";
  EXPECT_EQ(current_elsewhere, nullptr);

  // A device the scope is not of.
  const device_id other_device =
      this->dev().kind() == device_kind::emulated ? device_id::cuda(0) : device_id::emulated(0);
  EXPECT_EQ(thread_route(other_device), nullptr);

  EXPECT_TRUE(remove_thread_route(number));
  EXPECT_FALSE(find_route(s).has_value());
  EXPECT_EQ(thread_route(this->dev()), nullptr);
}

TYPED_TEST(AllocationRouter, ScopesNestAndAnEndOutOfOrderIsReported) {
  mr::pool outer{this->dev()};
  mr::pool inner{this->dev()};
  stream s{this->dev()};
  const auto a = add_thread_route(this->dev(), &outer, false);
  EXPECT_EQ(find_route(s)->pool, &outer);
  const auto b = add_thread_route(this->dev(), &inner, false);
  EXPECT_EQ(find_route(s)->pool, &inner);
  EXPECT_FALSE(remove_thread_route(a)) << "the outer scope ended first: that is out of order";
  EXPECT_EQ(find_route(s)->pool, &inner);
  EXPECT_TRUE(remove_thread_route(b));
  EXPECT_FALSE(find_route(s).has_value());
  EXPECT_TRUE(remove_thread_route(b)) << "ending a scope twice changes nothing";
}

TYPED_TEST(AllocationRouter, ACaptureComesBeforeAScope) {
  mr::pool p{this->dev()};
  stream captured{this->dev()};
  stream plain{this->dev()};
  const auto scope = add_thread_route(this->dev(), &p, false);
  auto graph_pool = std::make_shared<detail::graph_pool_state>(7);
  const stream_handle captured_handle = captured.view().handle();
  const auto token = detail::external_capture_began(
      this->dev(), graph_pool, [captured_handle](stream_handle h) { return h == captured_handle; });

  const auto on_captured = find_route(captured);
  ASSERT_TRUE(on_captured.has_value());
  ASSERT_TRUE(on_captured->capture.has_value()) << "the scope won over the capture";
  EXPECT_EQ(on_captured->capture->pool, graph_pool);
  EXPECT_EQ(on_captured->capture->number, token);
  EXPECT_EQ(on_captured->pool, nullptr);

  const auto on_plain = find_route(plain);
  ASSERT_TRUE(on_plain.has_value());
  EXPECT_FALSE(on_plain->capture.has_value());
  EXPECT_EQ(on_plain->pool, &p);

  detail::external_capture_ended(token);
  EXPECT_EQ(find_route(captured)->pool, &p);
  EXPECT_TRUE(remove_thread_route(scope));
  EXPECT_FALSE(find_route(captured).has_value());
}

TYPED_TEST(AllocationRouter, AFilterRoutesTheStreamsItAcceptsToAPoolNewestFirst) {
  mr::pool filtered_pool{this->dev(), mr::pool_options{.use_on_oom_only = true}};
  mr::pool scoped_pool{this->dev()};
  stream accepted{this->dev()};
  stream refused{this->dev()};
  const stream_handle accepted_handle = accepted.view().handle();
  const auto filter = detail::add_filtered_route(
      this->dev(), [accepted_handle](stream_handle h) { return h == accepted_handle; }, &filtered_pool, true);

  const auto hit = find_route(accepted);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->pool, &filtered_pool);
  EXPECT_TRUE(hit->on_oom_only);
  EXPECT_FALSE(find_route(refused).has_value());
  EXPECT_EQ(thread_route(this->dev()), nullptr) << "a filter is not a scope of this thread";

  // Another thread's allocations on the accepted stream: the filter decides, not the thread.
  std::optional<detail::route_match> from_other;
  std::thread other{[&] { from_other = find_route(accepted); }};
  other.join();
  ASSERT_TRUE(from_other.has_value());
  EXPECT_EQ(from_other->pool, &filtered_pool);

  // A scope opened after the filter is newer: it wins on this thread.
  const auto scope = add_thread_route(this->dev(), &scoped_pool, false);
  EXPECT_EQ(find_route(accepted)->pool, &scoped_pool);
  EXPECT_EQ(find_route(refused)->pool, &scoped_pool);
  EXPECT_TRUE(remove_thread_route(scope));
  EXPECT_EQ(find_route(accepted)->pool, &filtered_pool);

  detail::remove_filtered_route(filter);
  EXPECT_FALSE(find_route(accepted).has_value());
}

}  // namespace
}  // namespace syncmem::test
