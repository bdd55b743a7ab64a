#pragma once

// Filling memory of any kind with a seeded pattern and checking it, in stream
// order: what the conformance suite and the allocator's tests check memory with.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/backend.hpp"
#include "device_ops.hpp"
#include "pattern.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/mr/memory_resource.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::test {

// Copies between host memory and memory of `kind` (device memory through the
// device's backend, in order on `s`; host memory directly, after `s`).
inline void write_to(memory_kind kind, stream_view s, void* dst, const void* src, std::size_t n) {
  if (kind == memory_kind::device) {
    device_guard guard{s.device()};
    detail::backend_for(s.device()).memcpy_async(dst, src, n, s.device().index(), s.handle());
    s.synchronize();
  } else {
    s.synchronize();
    std::memcpy(dst, src, n);
  }
}

inline void read_from(memory_kind kind, stream_view s, void* dst, const void* src, std::size_t n) {
  write_to(kind, s, dst, src, n);
}

// Fills memory of `kind` with pattern_byte(seed, i) in order on `s`.
inline void fill_pattern(memory_kind kind, stream_view s, void* p, std::size_t n, std::uint64_t seed) {
  if (kind == memory_kind::device) {
    device_fill_pattern(s, p, n, seed);
  } else {
    write_pattern(static_cast<std::uint8_t*>(p), n, seed);
  }
}

// Whether memory of `kind` holds pattern_byte(seed, i), read in order on `s`.
inline ::testing::AssertionResult holds_pattern(memory_kind kind, stream_view s, const void* p, std::size_t n,
                                                std::uint64_t seed) {
  std::vector<std::uint8_t> copy(n);
  if (kind == memory_kind::device) {
    read_from(kind, s, copy.data(), p, n);
  } else {
    s.synchronize();
    std::memcpy(copy.data(), p, n);
  }
  if (const std::size_t i = pattern_mismatch(copy.data(), n, seed); i != n) {
    return ::testing::AssertionFailure() << "byte " << i << " of " << n << " is " << int{copy[i]} << ", expected "
                                         << int{pattern_byte(seed, i)};
  }
  return ::testing::AssertionSuccess();
}

}  // namespace syncmem::test
