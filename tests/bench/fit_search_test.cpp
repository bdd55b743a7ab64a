#include "fit_search.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "syncmem/error.hpp"

namespace syncmem::bench {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

// A workload that fits from `smallest` bytes on, and the limits it was tried at.
struct threshold {
  std::size_t smallest;
  std::vector<std::size_t> tried;
  bool operator()(std::size_t limit) {
    tried.push_back(limit);
    return limit >= smallest;
  }
};

fit_search_result search(threshold& t, std::size_t low, std::size_t cap, std::size_t tolerance = 2 * mib,
                         std::size_t step = mib) {
  return find_smallest_fit(low, cap, tolerance, step, [&t](std::size_t limit) { return t(limit); });
}

TEST(FindSmallestFit, FindsTheThresholdWithinTheTolerance) {
  for (const std::size_t smallest : {1000 * mib, 1001 * mib, 1337 * mib, 1999 * mib, 2000 * mib, 3333 * mib}) {
    threshold t{smallest, {}};
    const auto r = search(t, 1000 * mib, 4000 * mib);
    ASSERT_TRUE(r.limit.has_value()) << smallest;
    EXPECT_GE(*r.limit, smallest);
    EXPECT_LT(*r.limit, smallest + 3 * mib) << "within tolerance + step";
    EXPECT_EQ(*r.limit % mib, 0U);
    EXPECT_EQ(static_cast<std::size_t>(r.tries), t.tried.size());
    for (const auto limit : t.tried) {
      EXPECT_GE(limit, 1000 * mib);
      EXPECT_LE(limit, 4000 * mib);
    }
  }
}

TEST(FindSmallestFit, GrowsTheUpperBoundByDoublingUpToTheCap) {
  threshold t{3500 * mib, {}};
  const auto r = search(t, 1000 * mib, 4000 * mib);
  ASSERT_TRUE(r.limit.has_value());
  ASSERT_GE(t.tried.size(), 2U);
  EXPECT_EQ(t.tried[0], 2000 * mib);
  EXPECT_EQ(t.tried[1], 4000 * mib) << "the cap, not 4000 MiB doubled";
}

TEST(FindSmallestFit, SaysWhenNothingUpToTheCapFits) {
  threshold t{5000 * mib, {}};
  const auto r = search(t, 1000 * mib, 4000 * mib);
  EXPECT_FALSE(r.limit.has_value());
  EXPECT_EQ(t.tried, (std::vector<std::size_t>{2000 * mib, 4000 * mib}));
}

TEST(FindSmallestFit, TakesAboutLogarithmicallyManyTries) {
  threshold t{1234 * mib, {}};
  const auto r = search(t, 1000 * mib, 4000 * mib);
  // One try to find an upper bound, then halving 1000 MiB down to 2 MiB.
  EXPECT_LE(r.tries, 1 + 10);
}

TEST(FindSmallestFit, AWorkloadThatFitsAtItsPeakEndsNearIt) {
  threshold t{0, {}};
  const auto r = search(t, 700 * mib + 12345, 2800 * mib);
  ASSERT_TRUE(r.limit.has_value());
  EXPECT_GE(*r.limit, 700 * mib + 12345);
  EXPECT_LE(*r.limit, 703 * mib);
}

TEST(FindSmallestFit, ACapAtTheLowerBoundIsTriedOnce) {
  threshold t{0, {}};
  const auto r = search(t, 64 * mib, 64 * mib);
  EXPECT_EQ(r.limit, 64 * mib);
  EXPECT_EQ(r.tries, 1);
}

TEST(FindSmallestFit, RefusesBoundsThatCannotHoldAFit) {
  threshold t{0, {}};
  EXPECT_THROW((void)search(t, 0, 64 * mib), logic_error);
  EXPECT_THROW((void)search(t, 128 * mib, 64 * mib), logic_error);
  EXPECT_THROW((void)search(t, 64 * mib, 128 * mib, mib, 2 * mib), logic_error) << "a step above the tolerance";
}

}  // namespace
}  // namespace syncmem::bench
