#pragma once

// Acting on device memory in stream order, on either kind of device: a kernel
// on CUDA devices, a host function on emulated ones.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "syncmem/stream.hpp"

namespace syncmem::test {

// Writes pattern_byte(seed, i) to p[i] for i in [0, bytes), in stream order.
void device_fill_pattern(stream_view s, void* p, std::size_t bytes, std::uint64_t seed);
// Adds `delta` to each byte of p[0, bytes) in stream order (a read-modify-write).
void device_add_bytes(stream_view s, void* p, std::size_t bytes, std::uint8_t delta);
// Keeps the stream busy for about `duration`, to widen race windows.
void device_sleep(stream_view s, std::chrono::microseconds duration);
// Reads n bytes of device memory into host memory, in order on s (pageable
// memory through the backend's own copy: complete when it returns).
[[nodiscard]] std::vector<std::uint8_t> read_device(stream_view s, const void* p, std::size_t n);

// The CUDA halves, in device_ops.cu (absent without CUDA).
namespace cuda_ops {
void fill_pattern(stream_view s, void* p, std::size_t bytes, std::uint64_t seed);
void add_bytes(stream_view s, void* p, std::size_t bytes, std::uint8_t delta);
void sleep(stream_view s, std::chrono::microseconds duration);
}  // namespace cuda_ops

}  // namespace syncmem::test
