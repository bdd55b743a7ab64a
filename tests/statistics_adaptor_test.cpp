// ctest-labels: threaded
#include "syncmem/mr/statistics_adaptor.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "adaptor_factories.hpp"
#include "syncmem/mr/failure_adaptor.hpp"

namespace syncmem::test {

template <device_kind Kind, int Index = 0>
struct counted : adapted_source<Kind, Index> {
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<mr::statistics_adaptor>(adapted_source<Kind, Index>::upstream());
  }
};
using kinds =
    ::testing::Types<counted<device_kind::emulated>, counted<device_kind::emulated, 2>, counted<device_kind::cuda>>;
INSTANTIATE_TYPED_TEST_SUITE_P(statistics_adaptor, resource_conformance, kinds);

namespace {

TEST(StatisticsAdaptor, CountsFailuresAndExposesItsUpstream) {
  mr::emulated_resource source{device_id::emulated(0)};
  mr::failure_adaptor failing{source, mr::failure_adaptor::larger_than(1000)};
  mr::statistics_adaptor counted{failing};
  EXPECT_EQ(&counted.upstream(), &failing);
  EXPECT_EQ(counted.name(), "statistics_adaptor(failure_adaptor(emulated_resource(emulated:0)))");
  EXPECT_EQ(counted.device(), device_id::emulated(0));
  EXPECT_EQ(counted.kind(), memory_kind::device);
  auto s = default_stream(device_id::emulated(0));
  EXPECT_THROW((void)counted.allocate(5000, s), out_of_memory);
  void* p = counted.allocate(100, s);
  auto st = counted.statistics();
  EXPECT_EQ(st.failed_allocations, 1);
  EXPECT_EQ(st.bytes.current, 100);
  EXPECT_EQ(st.allocations.total, 1);
  counted.deallocate(p, 100, s);
  void* q = counted.allocate(50, s);
  counted.reset_peaks();
  st = counted.statistics();
  EXPECT_EQ(st.bytes.peak, 50);
  EXPECT_EQ(st.allocations.peak, 1);
  EXPECT_EQ(st.bytes.total, 150);
  counted.deallocate(q, 50, s);
  EXPECT_TRUE(counted.is_equal(mr::statistics_adaptor{failing}));
  EXPECT_FALSE(counted.is_equal(source));
}

TEST(StatisticsAdaptor, IsExactUnderManyThreads) {
  mr::emulated_resource source{device_id::emulated(1)};
  mr::statistics_adaptor counted{source};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      auto s = default_stream(device_id::emulated(1));
      for (int i = 0; i < 200; ++i) {
        const std::size_t bytes = 1 + static_cast<std::size_t>(t * 1000 + i);
        void* p = counted.allocate(bytes, s);
        counted.deallocate(p, bytes, s);
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto st = counted.statistics();
  EXPECT_EQ(st.bytes.current, 0);
  EXPECT_EQ(st.allocations.current, 0);
  EXPECT_EQ(st.allocations.total, 1200);
  EXPECT_EQ(st.deallocations, 1200);
  EXPECT_LE(st.allocations.peak, 6);
}

}  // namespace
}  // namespace syncmem::test
