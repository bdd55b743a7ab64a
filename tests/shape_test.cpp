// shape: validation (negative extents, too many axes, overflowing counts),
// counts, Caffe's canonical (negative) axes, equality and printing.
#include "syncmem/shape.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "syncmem/error.hpp"
#include "test_support.hpp"

using ::testing::HasSubstr;

namespace syncmem {
namespace {

using test::error_of;

TEST(Shape, ScalarHasNoAxesAndOneElement) {
  const shape s;
  EXPECT_EQ(s.num_axes(), 0);
  EXPECT_EQ(s.count(), 1);
  EXPECT_TRUE(s.extents().empty());
  EXPECT_EQ(s.to_string(), "()");
  EXPECT_EQ(s, shape{});
  EXPECT_THAT(error_of([&] { return s[0]; }), HasSubstr("a scalar has no axes"));
}

TEST(Shape, CountsAndExtents) {
  const shape s{2, 3, 4, 5};
  EXPECT_EQ(s.num_axes(), 4);
  EXPECT_EQ(s.count(), 120);
  EXPECT_EQ(s.count(1), 60);
  EXPECT_EQ(s.count(1, 3), 12);
  EXPECT_EQ(s.count(2, 2), 1);
  EXPECT_EQ(s.count(4), 1);
  EXPECT_EQ(s.count(0, 4), 120);
  EXPECT_EQ(s.to_vector(), (std::vector<std::int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(s.to_string(), "(2, 3, 4, 5)");
  EXPECT_EQ(shape{7}.to_string(), "(7)");
  std::ostringstream os;
  os << s;
  EXPECT_EQ(os.str(), "(2, 3, 4, 5)");
  EXPECT_THAT(error_of([&] { return s.count(3, 2); }), HasSubstr("count(3, 2) needs 0 <= start <= end <= 4"));
  EXPECT_THAT(error_of([&] { return s.count(-1, 2); }), HasSubstr("count(-1, 2)"));
  EXPECT_THAT(error_of([&] { return s.count(0, 5); }), HasSubstr("count(0, 5)"));
}

TEST(Shape, NegativeAxesCountFromTheEnd) {
  const shape s{2, 3, 4, 5};
  for (int axis = -4; axis < 4; ++axis) {
    const int canonical = axis < 0 ? axis + 4 : axis;
    EXPECT_EQ(s.canonical_axis(axis), canonical);
    EXPECT_EQ(s[axis], s.extents()[static_cast<std::size_t>(canonical)]);
    EXPECT_EQ(s.dim(axis), s[axis]);
  }
  EXPECT_THAT(error_of([&] { return s[4]; }), HasSubstr("axis 4 is out of range for shape (2, 3, 4, 5) with 4 axes: "
                                                        "valid axes are -4..3"));
  EXPECT_THAT(error_of([&] { return s.canonical_axis(-5); }), HasSubstr("axis -5 is out of range"));
}

TEST(Shape, ZeroExtentsGiveZeroCount) {
  const shape s{3, 0, 2};
  EXPECT_EQ(s.count(), 0);
  EXPECT_EQ(s.count(2), 2);
  // The product of the nonzero extents must fit; with a zero extent it still must.
  const std::int64_t big = std::int64_t{1} << 31;
  const shape huge_but_empty{0, big, big};
  EXPECT_EQ(huge_but_empty.count(), 0);
  EXPECT_EQ(huge_but_empty.count(1), big * big);
  EXPECT_THAT(error_of([&] { return shape{0, big * 2, big * 2}; }), HasSubstr("overflows a 64-bit integer"));
}

TEST(Shape, RefusesBadExtentsNamingThem) {
  EXPECT_THAT(error_of([] {
                return shape{2, -3, 4};
              }),
              HasSubstr("shape (2, -3, 4): axis 1 has extent -3; extents must be >= 0"));
  const std::int64_t big = std::int64_t{1} << 32;
  EXPECT_THAT(error_of([&] {
                return shape{big, big};
              }),
              HasSubstr("the element count overflows a 64-bit integer (at axis 1)"));
  EXPECT_EQ((shape{big, big / 2 - 1}.count()), big * (big / 2 - 1));
  std::vector<std::int64_t> many(33, 1);
  EXPECT_THAT(error_of([&] { return shape{std::span<const std::int64_t>{many}}; }),
              HasSubstr("33 axes; a shape has at most 32 axes"));
  many.pop_back();
  const shape most{std::span<const std::int64_t>{many}};
  EXPECT_EQ(most.num_axes(), 32);
  EXPECT_EQ(most.count(), 1);
}

TEST(Shape, FromCaffesVectorOfInt) {
  const std::vector<int> caffe{2, 3, 4};
  EXPECT_EQ(shape{caffe}, (shape{2, 3, 4}));
  const std::vector<std::size_t> sizes{5, 6};
  EXPECT_EQ(shape{sizes}, (shape{5, 6}));
  const std::vector<std::uint64_t> too_big{std::uint64_t{1} << 63};
  EXPECT_THAT(error_of([&] { return shape{too_big}; }), HasSubstr("extents must be >= 0"));
  const std::vector<int> negative{1, -1};
  EXPECT_THAT(error_of([&] { return shape{negative}; }), HasSubstr("axis 1 has extent -1"));
}

TEST(Shape, EqualityAndWithExtent) {
  EXPECT_EQ((shape{2, 3}), (shape{2, 3}));
  EXPECT_NE((shape{2, 3}), (shape{3, 2}));
  EXPECT_NE((shape{2, 3}), (shape{2, 3, 1}));
  EXPECT_NE(shape{1}, shape{});
  EXPECT_EQ((shape{2, 3, 4}.with_extent(0, 7)), (shape{7, 3, 4}));
  EXPECT_EQ((shape{2, 3, 4}.with_extent(-1, 0)), (shape{2, 3, 0}));
  EXPECT_THAT(error_of([] { return shape{2, 3}.with_extent(0, -1); }), HasSubstr("extents must be >= 0"));
  EXPECT_THAT(error_of([] { return shape{2, 3}.with_extent(2, 1); }), HasSubstr("axis 2 is out of range"));
}

}  // namespace
}  // namespace syncmem
