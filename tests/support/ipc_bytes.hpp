#pragma once

// What ipc_test and its peer process (ipc_peer) agree on without talking:
// the bytes a seed stands for, and a hash of bytes, so that a line of text
// can carry what a buffer holds.

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace syncmem::test {

[[nodiscard]] inline std::vector<std::uint8_t> seeded_bytes(std::uint64_t seed, std::size_t n) {
  std::mt19937_64 random{seed};
  std::vector<std::uint8_t> bytes(n);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(random());
  return bytes;
}

// FNV-1a, 64 bits, in hex.
[[nodiscard]] inline std::string fnv1a(const std::vector<std::uint8_t>& bytes) {
  std::uint64_t h = 14695981039346656037ULL;
  for (const auto b : bytes) h = (h ^ b) * 1099511628211ULL;
  return fmt::format("{:016x}", h);
}

}  // namespace syncmem::test
