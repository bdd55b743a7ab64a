#pragma once

// A byte pattern that host and device code compute alike: byte i of a buffer
// filled with `seed`. Every test draws a fresh seed, so no two runs write the
// same bytes.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SYNCMEM_TEST_HD __host__ __device__
#else
#define SYNCMEM_TEST_HD
#endif

namespace syncmem::test {

SYNCMEM_TEST_HD inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

SYNCMEM_TEST_HD inline std::uint8_t pattern_byte(std::uint64_t seed, std::size_t i) {
  return static_cast<std::uint8_t>(mix(seed ^ (static_cast<std::uint64_t>(i) >> 3)) >> (8 * (i & 7)));
}

// The pattern eight bytes at a time: bytes 8j .. 8j+7 are the little-endian
// bytes of mix(seed ^ j). A byte loop mixes every word eight times and, under
// the sanitizers, checks every byte's access alone: filling and checking the
// hundreds of MiB the large-page tests map took most of their time.
constexpr bool pattern_by_words = std::endian::native == std::endian::little;

// Writes pattern_byte(seed, i) to b[i] for i in [0, n).
inline void write_pattern(std::uint8_t* b, std::size_t n, std::uint64_t seed) {
  std::size_t i = 0;
  if constexpr (pattern_by_words) {
    for (; n - i >= 8; i += 8) {
      const std::uint64_t word = mix(seed ^ (static_cast<std::uint64_t>(i) >> 3));
      std::memcpy(b + i, &word, 8);
    }
  }
  for (; i < n; ++i) b[i] = pattern_byte(seed, i);
}

// The first i in [0, n) where b[i] is not pattern_byte(seed, i); n if none.
inline std::size_t pattern_mismatch(const std::uint8_t* b, std::size_t n, std::uint64_t seed) {
  std::size_t i = 0;
  if constexpr (pattern_by_words) {
    for (; n - i >= 8; i += 8) {
      const std::uint64_t word = mix(seed ^ (static_cast<std::uint64_t>(i) >> 3));
      if (std::memcmp(b + i, &word, 8) != 0) break;  // the byte loop below finds which byte
    }
  }
  for (; i < n; ++i) {
    if (b[i] != pattern_byte(seed, i)) return i;
  }
  return n;
}

}  // namespace syncmem::test
