// What the caching allocator holds from the device, and its limit.
#include "mr/caching/reservation.hpp"

#include <gtest/gtest.h>

namespace syncmem::mr::detail::caching {
namespace {

TEST(Reservation, CountsBytesAndPeak) {
  reservation r{std::nullopt};
  EXPECT_EQ(r.limit(), std::nullopt);
  EXPECT_TRUE(r.admits(std::size_t{1} << 50));
  r.add(300);
  r.add(200);
  r.remove(400);
  r.count_growth();
  r.count_release();
  EXPECT_EQ(r.bytes(), 100U);
  EXPECT_EQ(r.peak(), 500U);
  r.reset_peak();
  EXPECT_EQ(r.peak(), 100U);
  EXPECT_EQ(r.growths(), 1U);
  EXPECT_EQ(r.releases(), 1U);
}

TEST(Reservation, TheLimitRefusesAndIsRemembered) {
  reservation r{1000};
  r.add(600);
  EXPECT_TRUE(r.admits(400));
  EXPECT_FALSE(r.limit_hit());
  EXPECT_FALSE(r.admits(401));
  EXPECT_FALSE(r.admits(std::size_t{1} << 60));  // no overflow
  EXPECT_TRUE(r.limit_hit());
  EXPECT_TRUE(r.admits(10));
  EXPECT_TRUE(r.limit_hit()) << "kept until forgotten";
  r.forget_limit_hit();
  EXPECT_FALSE(r.limit_hit());
  r.set_limit(std::nullopt);
  EXPECT_TRUE(r.admits(std::size_t{1} << 40));
  r.set_limit(500);
  EXPECT_EQ(r.limit(), 500U);
  EXPECT_FALSE(r.admits(0)) << "already over a lowered limit";
}

}  // namespace
}  // namespace syncmem::mr::detail::caching
