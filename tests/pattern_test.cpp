// The tests' byte pattern: writing and checking it a word at a time gives the
// bytes pattern_byte defines (what device kernels write byte by byte), at
// every length and every position of a wrong byte.
#include "pattern.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "test_support.hpp"

namespace syncmem::test {
namespace {

TEST(Pattern, WritingByWordsGivesEveryBytePatternByteDefines) {
  const std::uint64_t seed = fresh_seed();
  for (std::size_t n = 0; n <= 67; ++n) {
    // One guard byte on each side, and a start at every offset modulo 8.
    std::vector<std::uint8_t> buffer(n + 2 + n % 8, 0xA5);
    std::uint8_t* p = buffer.data() + 1 + n % 8;
    write_pattern(p, n, seed);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(p[i], pattern_byte(seed, i)) << "byte " << i << " of " << n;
    EXPECT_EQ(p[-1], 0xA5) << n;
    EXPECT_EQ(p[n], 0xA5) << n;
    EXPECT_EQ(pattern_mismatch(p, n, seed), n) << n;
  }
}

TEST(Pattern, ACheckFindsEachWrongByteExactly) {
  const std::uint64_t seed = fresh_seed();
  const std::size_t n = 43;  // five words and three bytes
  std::vector<std::uint8_t> bytes(n);
  write_pattern(bytes.data(), n, seed);
  for (std::size_t i = 0; i < n; ++i) {
    bytes[i] ^= 0x10;
    EXPECT_EQ(pattern_mismatch(bytes.data(), n, seed), i);
    bytes[i] ^= 0x10;
  }
  EXPECT_LT(pattern_mismatch(bytes.data(), n, seed ^ 1), n);  // another seed's pattern differs
}

}  // namespace
}  // namespace syncmem::test
