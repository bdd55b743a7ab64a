// ctest-labels: threaded
#include "syncmem/mr/failure_adaptor.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>

#include "adaptor_factories.hpp"

using ::testing::HasSubstr;

namespace syncmem::test {

template <device_kind Kind, int Index = 0>
struct never_failing : adapted_source<Kind, Index> {
  static std::unique_ptr<mr::memory_resource> make() {
    return std::make_unique<mr::failure_adaptor>(adapted_source<Kind, Index>::upstream());
  }
};
using kinds = ::testing::Types<never_failing<device_kind::emulated>, never_failing<device_kind::emulated, 1>,
                               never_failing<device_kind::cuda>>;
INSTANTIATE_TYPED_TEST_SUITE_P(failure_adaptor, resource_conformance, kinds);

namespace {

std::vector<bool> outcomes(mr::failure_adaptor& f, const std::vector<std::size_t>& sizes) {
  auto s = default_stream(device_id::emulated(0));
  std::vector<bool> failed;
  for (auto bytes : sizes) {
    try {
      void* p = f.allocate(bytes, s);
      f.deallocate(p, bytes, s);
      failed.push_back(false);
    } catch (const out_of_memory& e) {
      EXPECT_THAT(e.what(), HasSubstr("injected"));
      EXPECT_EQ(e.info().requested, bytes);
      EXPECT_EQ(e.info().device, device_id::emulated(0));
      failed.push_back(true);
    }
  }
  return failed;
}

TEST(FailureAdaptor, FailsTheChosenCalls) {
  mr::emulated_resource source{device_id::emulated(0)};
  const std::vector<std::size_t> sizes{10, 20, 30, 4000, 50, 60};
  mr::failure_adaptor nth{source, mr::failure_adaptor::nth(2)};
  EXPECT_EQ(outcomes(nth, sizes), (std::vector<bool>{false, true, false, false, false, false}));
  mr::failure_adaptor every{source, mr::failure_adaptor::every_nth(2)};
  EXPECT_EQ(outcomes(every, sizes), (std::vector<bool>{false, true, false, true, false, true}));
  mr::failure_adaptor larger{source, mr::failure_adaptor::larger_than(100)};
  EXPECT_EQ(outcomes(larger, sizes), (std::vector<bool>{false, false, false, true, false, false}));
  mr::failure_adaptor all{source, mr::failure_adaptor::always()};
  EXPECT_EQ(outcomes(all, sizes), std::vector<bool>(6, true));
  EXPECT_EQ(all.failures(), 6U);
  EXPECT_EQ(all.calls(), 6U);
  mr::failure_adaptor none{source};
  EXPECT_EQ(outcomes(none, sizes), std::vector<bool>(6, false));
  EXPECT_THROW((void)mr::failure_adaptor::every_nth(0), logic_error);
}

TEST(FailureAdaptor, APredicateSeesCallsSizesAndStreams) {
  mr::emulated_resource source{device_id::emulated(0)};
  stream mine{device_id::emulated(0)};
  std::vector<std::uint64_t> calls;
  mr::failure_adaptor f{source, [&](std::uint64_t call, std::size_t bytes, stream_view s) {
                          calls.push_back(call);
                          return bytes == 77 && s == stream_view{mine};
                        }};
  EXPECT_THROW((void)f.allocate(77, mine), out_of_memory);
  void* p = f.allocate(77, default_stream(device_id::emulated(0)));
  f.deallocate(p, 77, default_stream(device_id::emulated(0)));
  EXPECT_EQ(calls, (std::vector<std::uint64_t>{1, 2}));
  f.set_predicate(mr::failure_adaptor::nth(3));
  EXPECT_THROW((void)f.allocate(1, mine), out_of_memory);
  EXPECT_EQ(f.name(), "failure_adaptor(emulated_resource(emulated:0))");
}

TEST(FailureAdaptor, NumbersCallsOnceUnderManyThreads) {
  mr::emulated_resource source{device_id::emulated(1)};
  std::mutex m;
  std::set<std::uint64_t> seen;
  mr::failure_adaptor f{source, [&](std::uint64_t call, std::size_t, stream_view) {
                          std::lock_guard lock{m};
                          EXPECT_TRUE(seen.insert(call).second) << call;
                          return call % 10 == 0;
                        }};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 5; ++t) {
    threads.emplace_back([&] {
      auto s = default_stream(device_id::emulated(1));
      for (int i = 0; i < 100; ++i) {
        try {
          void* p = f.allocate(64, s);
          f.deallocate(p, 64, s);
        } catch (const out_of_memory&) {
          ++failed;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(seen.size(), 500U);
  EXPECT_EQ(failed.load(), 50);
  EXPECT_EQ(f.failures(), 50U);
}

}  // namespace
}  // namespace syncmem::test
