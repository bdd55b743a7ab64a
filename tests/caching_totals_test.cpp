// The counts behind caching_resource::statistics().
#include "mr/caching/caching_totals.hpp"

#include <gtest/gtest.h>

namespace syncmem::mr::detail::caching {
namespace {

TEST(CachingTotals, HandedOutAndTakenBackWithPeaks) {
  caching_totals totals;
  const thread_caches none{1, 0};
  totals.hand_out(1024, 1000);
  totals.hand_out(4096, 4000);
  totals.take_back(4096, 4000);
  ++totals.central_hits;
  ++totals.misses;
  const auto t = totals.current(none);
  EXPECT_EQ(t.allocated, 1024);
  EXPECT_EQ(t.requested, 1000);
  EXPECT_EQ(t.live, 1);
  const caching_statistics s = totals.report(t);
  EXPECT_EQ(s.allocated_bytes, 1024U);
  EXPECT_EQ(s.peak_allocated_bytes, 5120U);
  EXPECT_EQ(s.requested_bytes, 1000U);
  EXPECT_EQ(s.peak_requested_bytes, 5000U);
  EXPECT_EQ(s.live_allocations, 1U);
  EXPECT_EQ(s.allocations, 2U);
  EXPECT_EQ(s.deallocations, 1U);
  EXPECT_EQ(s.cache_hits, 1U);
  EXPECT_EQ(s.cache_misses, 1U);
  totals.reset_peaks(none, nullptr);
  EXPECT_EQ(totals.report(totals.current(none)).peak_allocated_bytes, 1024U);
}

TEST(CachingTotals, AThreadsDeltasAreFoldedInAndItsCountsAbsorbed) {
  caching_totals totals;
  const thread_caches none{1, 0};
  thread_cache tc{{}, nullptr, 1, std::size_t{1} << 20};
  block_store store;
  block* b = store.make();
  b->size = 2048;
  (void)tc.hand_out(b, stream_handle{}, 2000, 0);  // a hit of this thread
  totals.fold(tc);
  EXPECT_EQ(tc.allocated_delta.load(), 0);
  auto s = totals.report(totals.current(none));
  EXPECT_EQ(s.allocated_bytes, 2048U);
  EXPECT_EQ(s.peak_allocated_bytes, 2048U);
  EXPECT_EQ(s.thread_cache_hits, 0U) << "counts stay with the thread until it exits";
  totals.absorb(tc);
  s = totals.report(totals.current(none));
  EXPECT_EQ(s.allocations, 1U);
  EXPECT_EQ(s.thread_cache_hits, 1U);
  EXPECT_EQ(s.cache_hits, 1U);
  EXPECT_EQ(s.live_allocations, 1U);
}

}  // namespace
}  // namespace syncmem::mr::detail::caching
