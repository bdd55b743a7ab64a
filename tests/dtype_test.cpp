// dtype: names, sizes, the C++ type of each, and float16 / bfloat16
// conversions checked exhaustively (every one of the 65536 bit patterns, and
// every rounding boundary between neighbouring values) against references
// computed another way.
#include "syncmem/dtype.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace syncmem {
namespace {

static_assert(dtype_of<bool>() == dtype::bool_);
static_assert(dtype_of<std::int8_t>() == dtype::int8);
static_assert(dtype_of<std::uint8_t>() == dtype::uint8);
static_assert(dtype_of<std::int16_t>() == dtype::int16);
static_assert(dtype_of<std::int32_t>() == dtype::int32);
static_assert(dtype_of<std::int64_t>() == dtype::int64);
static_assert(dtype_of<long long>() == dtype::int64);
static_assert(dtype_of<const float>() == dtype::float32);
static_assert(dtype_of<double>() == dtype::float64);
static_assert(dtype_of<float16>() == dtype::float16);
static_assert(dtype_of<bfloat16>() == dtype::bfloat16);
static_assert(!element_type<std::uint16_t>);
static_assert(!element_type<std::uint32_t>);
static_assert(!element_type<std::uint64_t>);
static_assert(!element_type<long double>);
static_assert(!element_type<std::string>);
static_assert(!element_type<void*>);
static_assert(float16{1.0F}.bits() == 0x3C00);  // constexpr conversions
static_assert(bfloat16{1.0F}.bits() == 0x3F80);

TEST(Dtype, NamesAndSizes) {
  const std::vector<std::pair<std::string, std::size_t>> expected = {
      {"bool", 1},  {"int8", 1},    {"uint8", 1},    {"int16", 2},   {"int32", 4},
      {"int64", 8}, {"float16", 2}, {"bfloat16", 2}, {"float32", 4}, {"float64", 8}};
  ASSERT_EQ(std::size(all_dtypes), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(to_string(all_dtypes[i]), expected[i].first);
    EXPECT_EQ(size_of(all_dtypes[i]), expected[i].second) << expected[i].first;
  }
  EXPECT_TRUE(is_floating_point(dtype::bfloat16));
  EXPECT_TRUE(is_floating_point(dtype::float64));
  EXPECT_FALSE(is_floating_point(dtype::int64));
  EXPECT_FALSE(is_floating_point(dtype::bool_));
}

// ---- references -------------------------------------------------------------------

// binary16 decoded with ldexp from its definition: (-1)^s × 2^(e-15) × 1.m, or
// 2^-14 × 0.m for subnormals.
double half_reference(std::uint16_t h) {
  const int sign = (h >> 15) != 0 ? -1 : 1;
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  if (exponent == 0x1F)
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

double bfloat_reference(std::uint16_t b) {
  const int sign = (b >> 15) != 0 ? -1 : 1;
  const int exponent = (b >> 7) & 0xFF;
  const int mantissa = b & 0x7F;
  if (exponent == 0xFF)
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa, -133);
  return sign * std::ldexp(128 + mantissa, exponent - 134);
}

// Round to nearest, ties to even, by search: the positive finite values in
// increasing order (bit patterns 0..max_finite), the nearest one wins, a tie
// goes to the even pattern, and beyond the last value's half-ulp lies infinity.
std::uint16_t round_reference(float value, const std::vector<double>& positives, std::uint16_t infinity,
                              double overflow_threshold) {
  const std::uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double magnitude = std::fabs(static_cast<double>(value));
  if (magnitude >= overflow_threshold) return sign | infinity;
  const auto upper = std::lower_bound(positives.begin(), positives.end(), magnitude);
  if (upper == positives.begin()) return sign;  // zero
  const auto hi = static_cast<std::uint16_t>(upper - positives.begin());
  if (upper == positives.end()) return sign | static_cast<std::uint16_t>(hi - 1);
  const auto lo = static_cast<std::uint16_t>(hi - 1);
  const double below = magnitude - positives[lo];
  const double above = positives[hi] - magnitude;
  if (below < above) return sign | lo;
  if (above < below) return sign | hi;
  return sign | ((lo & 1) == 0 ? lo : hi);
}

std::vector<float> interesting_floats() {
  std::vector<float> values = {0.0F,
                               -0.0F,
                               1.0F,
                               -1.0F,
                               65504.0F,
                               65519.99F,
                               65520.0F,
                               65536.0F,
                               1e-8F,
                               5.960464477539063e-8F,    // 2^-24
                               2.98023223876953125e-8F,  // 2^-25
                               6.103515625e-05F,         // 2^-14
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity()};
  auto& rng = test::rng();
  for (int i = 0; i < 1'000'000; ++i) {
    const auto bits = static_cast<std::uint32_t>(rng());
    const float f = std::bit_cast<float>(bits);
    if (!std::isnan(f)) values.push_back(f);
  }
  // Values near the range of binary16, where its rounding is interesting.
  std::uniform_real_distribution<float> near_range{-70000.0F, 70000.0F};
  std::uniform_real_distribution<float> tiny{-1e-4F, 1e-4F};
  for (int i = 0; i < 200'000; ++i) {
    values.push_back(near_range(rng));
    values.push_back(tiny(rng));
  }
  return values;
}

// ---- float16 ------------------------------------------------------------------------

TEST(Float16, EveryBitPatternConvertsToFloatExactly) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = static_cast<float>(float16::from_bits(h));
    const double expected = half_reference(h);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << bits;
      // A NaN converts back to a NaN.
      const auto back = float16{f}.bits();
      ASSERT_EQ(back & 0x7C00, 0x7C00) << std::hex << bits;
      ASSERT_NE(back & 0x03FF, 0) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), expected) << std::hex << bits;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << bits;
    // Every binary16 is a float: converting back gives the same bits (+-0 too).
    ASSERT_EQ(float16{f}.bits(), h) << std::hex << bits;
  }
}

TEST(Float16, EveryRoundingBoundaryRoundsToNearestEven) {
  // Between each pair of neighbouring positive values (and above the largest,
  // towards infinity), the midpoint ties to the even pattern and the floats
  // just below and above it round down and up. Midpoints are exact in float.
  for (std::uint32_t lo = 0; lo < 0x7C00; ++lo) {
    const auto l = static_cast<std::uint16_t>(lo);
    const auto h = static_cast<std::uint16_t>(lo + 1);
    const double upper = h == 0x7C00 ? 65536.0 : half_reference(h);
    const double mid = (half_reference(l) + upper) / 2;
    const auto m = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(m), mid);
    const std::uint16_t even = (l & 1) == 0 ? l : h;
    for (std::uint16_t sign : {std::uint16_t{0}, std::uint16_t{0x8000}}) {
      const float s = sign != 0 ? -1.0F : 1.0F;
      ASSERT_EQ(float16{s * m}.bits(), sign | even) << std::hex << lo;
      ASSERT_EQ(float16{s * std::nextafter(m, 0.0F)}.bits(), sign | l) << std::hex << lo;
      ASSERT_EQ(float16{s * std::nextafter(m, std::numeric_limits<float>::infinity())}.bits(), sign | h)
          << std::hex << lo;
    }
  }
}

TEST(Float16, RandomFloatsRoundLikeTheReference) {
  std::vector<double> positives;
  for (std::uint32_t b = 0; b < 0x7C00; ++b) positives.push_back(half_reference(static_cast<std::uint16_t>(b)));
  for (float f : interesting_floats()) {
    ASSERT_EQ(float16{f}.bits(), round_reference(f, positives, 0x7C00, 65520.0)) << f;
  }
  EXPECT_EQ(float16{std::numeric_limits<float>::quiet_NaN()}.bits() & 0x7E00, 0x7E00);
  EXPECT_TRUE(std::isnan(static_cast<float>(float16{-std::numeric_limits<float>::quiet_NaN()})));
  // A signalling NaN whose payload lies in the low bits still converts to a NaN.
  EXPECT_TRUE(std::isnan(static_cast<float>(float16{std::bit_cast<float>(0x7F800001U)})));
}

#if defined(__FLT16_MAX__) && (!defined(__clang__) || __clang_major__ >= 15)
// The compiler's own _Float16 (IEEE binary16, converted by libgcc's soft-float
// or by F16C instructions) as a second reference.
TEST(Float16, AgreesWithTheCompilersFloat16) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float theirs = static_cast<float>(std::bit_cast<_Float16>(h));
    const float ours = static_cast<float>(float16::from_bits(h));
    if (std::isnan(theirs)) {
      ASSERT_TRUE(std::isnan(ours));
    } else {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(ours), std::bit_cast<std::uint32_t>(theirs)) << std::hex << bits;
    }
  }
  for (float f : interesting_floats()) {
    ASSERT_EQ(float16{f}.bits(), std::bit_cast<std::uint16_t>(static_cast<_Float16>(f))) << f;
  }
}
#endif

// ---- bfloat16 ------------------------------------------------------------------------

TEST(Bfloat16, EveryBitPatternConvertsToFloatExactly) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const float f = static_cast<float>(bfloat16::from_bits(b));
    const double expected = bfloat_reference(b);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << bits;
      ASSERT_TRUE(std::isnan(static_cast<float>(bfloat16{f}))) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), expected) << std::hex << bits;
    ASSERT_EQ(bfloat16{f}.bits(), b) << std::hex << bits;
  }
}

TEST(Bfloat16, EveryRoundingBoundaryRoundsToNearestEven) {
  for (std::uint32_t lo = 0; lo < 0x7F80; ++lo) {
    const auto l = static_cast<std::uint16_t>(lo);
    const auto h = static_cast<std::uint16_t>(lo + 1);
    const double upper = h == 0x7F80 ? std::ldexp(1.0, 128) : bfloat_reference(h);
    const double mid = (bfloat_reference(l) + upper) / 2;
    const std::uint16_t even = (l & 1) == 0 ? l : h;
    if (mid > std::numeric_limits<float>::max()) {
      // The midpoint towards infinity is not a float: the largest float rounds to infinity.
      ASSERT_EQ(bfloat16{std::numeric_limits<float>::max()}.bits(), 0x7F80);
      continue;
    }
    const auto m = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(m), mid);
    for (std::uint16_t sign : {std::uint16_t{0}, std::uint16_t{0x8000}}) {
      const float s = sign != 0 ? -1.0F : 1.0F;
      ASSERT_EQ(bfloat16{s * m}.bits(), sign | even) << std::hex << lo;
      ASSERT_EQ(bfloat16{s * std::nextafter(m, 0.0F)}.bits(), sign | l) << std::hex << lo;
      ASSERT_EQ(bfloat16{s * std::nextafter(m, std::numeric_limits<float>::infinity())}.bits(), sign | h)
          << std::hex << lo;
    }
  }
}

TEST(Bfloat16, RandomFloatsRoundLikeTheReference) {
  std::vector<double> positives;
  for (std::uint32_t b = 0; b < 0x7F80; ++b) positives.push_back(bfloat_reference(static_cast<std::uint16_t>(b)));
  // Halfway between the largest bfloat16 and 2^128.
  const double overflow = (bfloat_reference(0x7F7F) + std::ldexp(1.0, 128)) / 2;
  for (float f : interesting_floats()) {
    ASSERT_EQ(bfloat16{f}.bits(), round_reference(f, positives, 0x7F80, overflow)) << f;
  }
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16{std::numeric_limits<float>::quiet_NaN()})));
  // A NaN whose payload lies only in the dropped bits stays a NaN.
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16{std::bit_cast<float>(0x7F800001U)})));
}

}  // namespace
}  // namespace syncmem
