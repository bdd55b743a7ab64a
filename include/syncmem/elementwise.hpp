#pragma once

/// @file elementwise.hpp
/// @brief Element-wise work on device memory from plain C++, in stream order,
/// on every backend: fill, iota, axpy and a checksum. On a CUDA device each is
/// a kernel; on an emulated device, a host function run by the stream's
/// worker. Either way it is ordered on the stream like any other device work.
///
/// These are for device memory: spans from device_span() /
/// mutable_device_span() of a synced_memory or tensor, from a device_vector,
/// or from a device resource. Writing device memory from the host (through
/// stream::launch_host_func, say) works on emulated devices only and is
/// undefined on CUDA; these functions are the portable way.
///
/// Every function checks that the memory is device memory of the stream's
/// device where the backend can tell (emulated devices always, CUDA through
/// the runtime) and throws syncmem::logic_error naming the function, the
/// pointer's kind and both devices otherwise; nothing is enqueued then.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "syncmem/dtype.hpp"
#include "syncmem/stream.hpp"

namespace syncmem {

namespace detail {
void elementwise_fill(stream_view s, void* p, std::size_t n, std::size_t itemsize, std::uint64_t bits);
void elementwise_iota(stream_view s, dtype type, void* p, std::size_t n, std::int64_t start);
void elementwise_axpy(stream_view s, dtype type, double alpha, const void* x, std::size_t nx, void* y, std::size_t ny);
[[nodiscard]] std::uint64_t elementwise_checksum(stream_view s, const void* p, std::size_t bytes);
template <class T>
[[nodiscard]] std::uint64_t fill_bits(T value) noexcept {
  if constexpr (sizeof(T) == 1) return std::bit_cast<std::uint8_t>(value);
  if constexpr (sizeof(T) == 2) return std::bit_cast<std::uint16_t>(value);
  if constexpr (sizeof(T) == 4) return std::bit_cast<std::uint32_t>(value);
  if constexpr (sizeof(T) == 8) return std::bit_cast<std::uint64_t>(value);
}
}  // namespace detail

// clang-format 14 cannot put a requires-clause on a line of its own.
// clang-format off
/// @brief Sets every element of `x` to `value`, in order on `s`.
/// @param x device memory of s.device()
/// @throws syncmem::logic_error when `x` is not device memory of s.device()
template <class T>
  requires std::is_trivially_copyable_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8)
void fill(std::span<T> x, std::type_identity_t<T> value, stream_view s) {
  detail::elementwise_fill(s, x.data(), x.size(), sizeof(T), detail::fill_bits(value));
}

/// @brief Sets x[i] = start + i (as std::iota does), in order on `s`.
/// @tparam T std::int32_t, std::int64_t, float or double
/// @throws syncmem::logic_error when `x` is not device memory of s.device()
template <class T>
  requires std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> || std::is_same_v<T, float> ||
           std::is_same_v<T, double>
void iota(std::span<T> x, std::int64_t start, stream_view s) {
  detail::elementwise_iota(s, dtype_of<T>(), x.data(), x.size(), start);
}

/// @brief y[i] += alpha × x[i], in order on `s` (BLAS axpy).
/// @tparam T float or double
/// @throws syncmem::logic_error when the spans differ in size, or are not
/// device memory of s.device()
template <class T>
  requires std::is_same_v<T, float> || std::is_same_v<T, double>
void axpy(std::type_identity_t<T> alpha, std::span<const T> x, std::span<T> y, stream_view s) {
  detail::elementwise_axpy(s, dtype_of<T>(), static_cast<double>(alpha), x.data(), x.size(), y.data(), y.size());
}
/// @brief axpy with a span of mutable x.
template <class T>
  requires std::is_same_v<T, float> || std::is_same_v<T, double>
void axpy(std::type_identity_t<T> alpha, std::span<T> x, std::span<T> y, stream_view s) {
  axpy<T>(alpha, std::span<const T>{x}, y, s);
}

/// @brief A checksum of the bytes of `x`, computed on the device in order on
/// `s`; returns once `s` has reached it (it waits for the work before it on
/// `s`). Equal to host_checksum() of the same bytes, so that a test or a
/// program can check device results without copying them back.
/// @throws syncmem::logic_error when `x` is not device memory of s.device();
/// syncmem::out_of_memory when 8 bytes of scratch cannot be had
template <class T>
  requires std::is_trivially_copyable_v<T>
[[nodiscard]] std::uint64_t checksum(std::span<const T> x, stream_view s) {
  return detail::elementwise_checksum(s, x.data(), x.size_bytes());
}
/// @brief checksum() of a span of mutable elements.
template <class T>
  requires std::is_trivially_copyable_v<T> && (!std::is_const_v<T>)
[[nodiscard]] std::uint64_t checksum(std::span<T> x, stream_view s) {
  return checksum(std::span<const T>{x}, s);
}

/// @brief The same checksum of `bytes` bytes of host memory at `p`: the sum
/// modulo 2^64 of a mix of each little-endian 8-byte word (the last padded
/// with zeros) with its index.
[[nodiscard]] std::uint64_t host_checksum(const void* p, std::size_t bytes) noexcept;
/// @brief host_checksum() of the bytes of `x`.
template <class T>
  requires std::is_trivially_copyable_v<T>
[[nodiscard]] std::uint64_t host_checksum(std::span<T> x) noexcept {
  return host_checksum(static_cast<const void*>(x.data()), x.size_bytes());
}

// clang-format on

}  // namespace syncmem
