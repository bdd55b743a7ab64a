// ctest-labels: threaded
#include "syncmem/mr/limiting_adaptor.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "adaptor_factories.hpp"
#include "syncmem/mr/allocation_label.hpp"
#include "syncmem/mr/failure_adaptor.hpp"
#include "syncmem/mr/statistics_adaptor.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {

template <device_kind Kind, int Index = 0>
struct limited : adapted_source<Kind, Index> {
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<mr::limiting_adaptor>(adapted_source<Kind, Index>::upstream(), std::size_t{256} << 20);
  }
};
using kinds =
    ::testing::Types<limited<device_kind::emulated>, limited<device_kind::emulated, 2>, limited<device_kind::cuda>>;
INSTANTIATE_TYPED_TEST_SUITE_P(limiting_adaptor, resource_conformance, kinds);

namespace {

TEST(LimitingAdaptor, RefusesWhatWouldPassTheLimit) {
  mr::emulated_resource source{device_id::emulated(0)};
  mr::limiting_adaptor limited{source, 10000};
  EXPECT_EQ(limited.limit(), 10000U);
  EXPECT_EQ(&limited.upstream(), &source);
  auto s = default_stream(device_id::emulated(0));
  void* a = limited.allocate(6000, s);
  void* b = limited.allocate(4000, s);  // exactly at the limit
  EXPECT_EQ(limited.allocated_bytes(), 10000U);
  mr::scoped_allocation_label label{"one more byte"};
  try {
    (void)limited.allocate(1, s);
    FAIL() << "passed the limit";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.info().limit, 10000U);
    EXPECT_EQ(e.info().in_use, 10000U);
    EXPECT_EQ(e.info().requested, 1U);
    EXPECT_EQ(e.info().label, "one more byte");
    EXPECT_EQ(e.info().device, device_id::emulated(0));
    EXPECT_THAT(e.what(), HasSubstr("limiting_adaptor(emulated_resource(emulated:0))"));
  }
  EXPECT_THROW((void)limited.allocate(std::numeric_limits<std::size_t>::max(), s), out_of_memory);
  limited.deallocate(a, 6000, s);
  void* c = limited.allocate(6000, s);
  limited.deallocate(c, 6000, s);
  limited.deallocate(b, 4000, s);
  EXPECT_EQ(limited.allocated_bytes(), 0U);
}

TEST(LimitingAdaptor, AnUpstreamFailureGivesTheBytesBack) {
  mr::emulated_resource source{device_id::emulated(0)};
  mr::failure_adaptor failing{source, mr::failure_adaptor::always()};
  mr::limiting_adaptor limited{failing, 10000};
  EXPECT_THROW((void)limited.allocate(5000, default_stream(device_id::emulated(0))), out_of_memory);
  EXPECT_EQ(limited.allocated_bytes(), 0U);
}

TEST(LimitingAdaptor, HoldsUnderManyThreads) {
  mr::emulated_resource source{device_id::emulated(1)};
  mr::statistics_adaptor counted{source};
  constexpr std::size_t limit = 64 * 1024;
  mr::limiting_adaptor limited{counted, limit};
  std::vector<std::thread> threads;
  std::atomic<int> refused{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      auto s = default_stream(device_id::emulated(1));
      for (int i = 0; i < 200; ++i) {
        try {
          void* p = limited.allocate(10000, s);
          limited.deallocate(p, 10000, s);
        } catch (const out_of_memory&) {
          ++refused;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(counted.statistics().bytes.peak, static_cast<std::int64_t>(limit));
  EXPECT_EQ(limited.allocated_bytes(), 0U);
}

}  // namespace
}  // namespace syncmem::test
