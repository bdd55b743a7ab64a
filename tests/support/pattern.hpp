#pragma once

// A byte pattern that host and device code compute alike: byte i of a buffer
// filled with `seed`. Every test draws a fresh seed, so no two runs write the
// same bytes.

#include <cstddef>
#include <cstdint>

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

}  // namespace syncmem::test
