// ctest-labels: threaded
#include "syncmem/mr/tracking_adaptor.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "adaptor_factories.hpp"
#include "syncmem/mr/allocation_label.hpp"
#include "syncmem/mr/statistics_adaptor.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {

template <device_kind Kind, int Index = 0>
struct tracked : adapted_source<Kind, Index> {
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<mr::tracking_adaptor>(adapted_source<Kind, Index>::upstream());
  }
};
using kinds =
    ::testing::Types<tracked<device_kind::emulated>, tracked<device_kind::emulated, 1>, tracked<device_kind::cuda>>;
INSTANTIATE_TYPED_TEST_SUITE_P(tracking_adaptor, resource_conformance, kinds);

namespace {

TEST(TrackingAdaptor, ListsLiveAllocationsWithTheirLabels) {
  mr::emulated_resource source{device_id::emulated(0)};
  mr::tracking_adaptor tracking{source};
  EXPECT_EQ(&tracking.upstream(), &source);
  stream s{device_id::emulated(0)};
  void* a = nullptr;
  void* b = nullptr;
  {
    mr::scoped_allocation_label label{"weights"};
    a = tracking.allocate(1000, s);
    b = tracking.allocate(3000, s, 128);
  }
  void* c = tracking.allocate(500, s);
  auto live = tracking.live_allocations();
  ASSERT_EQ(live.size(), 3U);
  EXPECT_EQ(live[0].pointer, a);
  EXPECT_EQ(live[0].bytes, 1000U);
  EXPECT_EQ(live[0].label, "weights");
  EXPECT_EQ(live[0].stream, static_cast<std::uintptr_t>(s.view().handle()));
  EXPECT_EQ(live[1].alignment, 128U);
  EXPECT_EQ(live[2].label, "");
  EXPECT_LT(live[0].sequence, live[1].sequence);
  EXPECT_LT(live[1].sequence, live[2].sequence);
  EXPECT_EQ(tracking.live_count(), 3U);
  EXPECT_EQ(tracking.live_bytes(), 4500U);

  const auto report = tracking.leak_report();
  EXPECT_THAT(report, HasSubstr("3 live allocations"));
  EXPECT_THAT(report, HasSubstr("'weights': 2 allocations"));
  EXPECT_THAT(report, HasSubstr("(no label): 1 allocation"));
  EXPECT_THAT(report, HasSubstr("(4500 bytes)"));
  EXPECT_LT(report.find("'weights'"), report.find("(no label)")) << "largest label first";

  tracking.deallocate(b, 3000, s, 128);
  tracking.deallocate(a, 1000, s);
  tracking.deallocate(c, 500, s);
  EXPECT_TRUE(tracking.live_allocations().empty());
  EXPECT_EQ(tracking.leak_report(), "");
}

TEST(TrackingAdaptor, DoubleFreesAreReportedNotForwarded) {
  mr::emulated_resource source{device_id::emulated(0)};
  mr::statistics_adaptor counted{source};
  mr::tracking_adaptor tracking{counted};
  auto s = default_stream(device_id::emulated(0));
  void* p = tracking.allocate(64, s);
  tracking.deallocate(p, 64, s);
  tracking.deallocate(p, 64, s);
  int local = 0;
  tracking.deallocate(&local, 4, s);
  EXPECT_EQ(counted.statistics().deallocations, 1);
  EXPECT_FALSE(tracking.is_equal(mr::tracking_adaptor{counted}));
}

TEST(TrackingAdaptor, AWrongSizeIsCorrectedFromTheRecord) {
  mr::emulated_resource source{device_id::emulated(0)};
  mr::statistics_adaptor counted{source};
  mr::tracking_adaptor tracking{counted};
  auto s = default_stream(device_id::emulated(0));
  void* p = tracking.allocate(640, s);
  tracking.deallocate(p, 64, s);
  EXPECT_EQ(counted.statistics().bytes.current, 0);
}

TEST(TrackingAdaptor, ReportsLeaksWhenDestroyed) {
  mr::emulated_resource source{device_id::emulated(0)};
  auto s = default_stream(device_id::emulated(0));
  void* leaked = nullptr;
  {
    mr::tracking_adaptor tracking{source};
    mr::scoped_allocation_label label{"forgotten"};
    leaked = tracking.allocate(256, s);
    testing::internal::CaptureStderr();
  }
  const auto logged = testing::internal::GetCapturedStderr();
  EXPECT_THAT(logged, HasSubstr("'forgotten'"));
  source.deallocate(leaked, 256, s);
}

TEST(TrackingAdaptor, KeepsCountUnderManyThreads) {
  mr::emulated_resource source{device_id::emulated(2)};
  mr::tracking_adaptor tracking{source};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      auto s = default_stream(device_id::emulated(2));
      std::vector<void*> mine;
      for (int i = 0; i < 100; ++i) mine.push_back(tracking.allocate(100, s));
      for (void* p : mine) tracking.deallocate(p, 100, s);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(tracking.live_count(), 0U);
}

}  // namespace
}  // namespace syncmem::test
