#pragma once

/// @file device_vector.hpp
/// @brief A typed, owning, stream-ordered array of trivially copyable
/// elements in device memory, whose elements are not initialised unless asked
/// (RMM's rmm::device_uvector).

#include <cstddef>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "syncmem/device_buffer.hpp"
#include "syncmem/elementwise.hpp"
#include "syncmem/stream.hpp"

namespace syncmem {

namespace detail {
// Bytes of `count` elements of `element_size` bytes; throws syncmem::logic_error
// naming the function when that overflows std::size_t.
[[nodiscard]] std::size_t vector_bytes(std::size_t count, std::size_t element_size, const char* function);
// Throws syncmem::logic_error: `index` is not below `size`.
[[noreturn]] void throw_vector_index(const device_buffer& b, const char* function, std::size_t index, std::size_t size);
// Throws syncmem::logic_error: a host span of `given` elements where `expected` are needed.
[[noreturn]] void throw_vector_span(const device_buffer& b, const char* function, std::size_t given,
                                    std::size_t expected);
// Throws syncmem::logic_error naming the vector and `function` when `s` is a
// stream of another device than the buffer's, before the buffer's own check
// (which would name device_buffer and its own call).
void check_vector_stream(const device_buffer& b, const char* function, stream_view s);
}  // namespace detail

/// @brief `size()` elements of `T` in the memory of a device_buffer (see
/// device_buffer.hpp for streams, the resource and host copies, which work the
/// same way here). Elements are uninitialised unless a constructor or fill
/// (elementwise.hpp) sets them: making one costs an allocation, nothing more.
///
/// Element access from the host copies one element through the transfer
/// engine (element(), set_element()); for kernels and the element-wise
/// functions use span().
///
/// Errors name the vector's buffer, the call, the index or size given and the
/// valid range; a stream of another device than stream()'s is refused up
/// front, naming the vector and the call. A call that throws leaves the vector
/// as it was.
/// Thread safety: like a standard container.
// clang-format 14 cannot put a requires-clause on a line of its own.
// clang-format off
template <class T>
  requires std::is_trivially_copyable_v<T> && (!std::is_const_v<T>)
class device_vector {
  // clang-format on
 public:
  using value_type = T;
  using size_type = std::size_t;

  /// @brief An empty vector: no memory.
  device_vector() noexcept = default;
  /// @brief `n` uninitialised elements from `resource`, in order on `s`.
  /// @param resource nullptr: mr::get_per_device_resource(s.device())
  /// @throws syncmem::out_of_memory; syncmem::logic_error when n × sizeof(T) overflows
  device_vector(std::size_t n, stream_view s, mr::memory_resource* resource = nullptr)
      : buffer_{detail::vector_bytes(n, sizeof(T), "device_vector"), s, resource} {}
  /// @brief `n` elements set to `value` on the device (elementwise.hpp's fill), in order on `s`.
  /// @throws as device_vector(n, s, resource), and syncmem::logic_error when the
  /// resource's memory is not device memory of s.device() (nothing is kept then)
  // clang-format off
  device_vector(std::size_t n, const T& value, stream_view s, mr::memory_resource* resource = nullptr)
    requires(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8)
      : device_vector{n, s, resource} {
    // clang-format on
    fill(span(), value, s);
  }
  /// @brief The elements of `host` (any host memory), copied in order on `s`;
  /// returns when the vector holds them.
  device_vector(std::span<const T> host, stream_view s, mr::memory_resource* resource = nullptr)
      : buffer_{host.data(), host.size_bytes(), s, resource} {}
  /// @brief As device_vector(std::span<const T>{host}, s, resource).
  device_vector(const std::vector<T>& host, stream_view s, mr::memory_resource* resource = nullptr)
      : device_vector{std::span<const T>{host}, s, resource} {}

  /// @brief A deep copy on `s`.
  [[nodiscard]] device_vector clone(stream_view s, mr::memory_resource* resource = nullptr) const {
    detail::check_vector_stream(buffer_, "clone", s);
    device_vector out;
    out.buffer_ = buffer_.clone(s, resource);
    return out;
  }

  // ---- size ------------------------------------------------------------------------
  [[nodiscard]] std::size_t size() const noexcept { return buffer_.size() / sizeof(T); }
  [[nodiscard]] bool is_empty() const noexcept { return buffer_.is_empty(); }
  [[nodiscard]] std::size_t capacity() const noexcept { return buffer_.capacity() / sizeof(T); }
  /// @brief Sets the size; the first min(old, new) elements keep their values,
  /// new ones are uninitialised. Reallocates only past capacity().
  /// @throws syncmem::out_of_memory (the vector is unchanged)
  void resize(std::size_t n, stream_view s) {
    detail::check_vector_stream(buffer_, "resize", s);
    buffer_.resize(detail::vector_bytes(n, sizeof(T), "resize"), s);
  }
  /// @brief Makes capacity() at least `n`.
  void reserve(std::size_t n, stream_view s) {
    detail::check_vector_stream(buffer_, "reserve", s);
    buffer_.reserve(detail::vector_bytes(n, sizeof(T), "reserve"), s);
  }
  /// @brief Makes capacity() equal to size().
  void shrink_to_fit(stream_view s) {
    detail::check_vector_stream(buffer_, "shrink_to_fit", s);
    buffer_.shrink_to_fit(s);
  }

  // ---- memory ------------------------------------------------------------------------
  /// @brief The elements, for kernels and elementwise.hpp (device memory for a device resource).
  [[nodiscard]] std::span<T> span() noexcept { return {data(), size()}; }
  [[nodiscard]] std::span<const T> span() const noexcept { return {data(), size()}; }
  [[nodiscard]] T* data() noexcept { return static_cast<T*>(buffer_.data()); }
  [[nodiscard]] const T* data() const noexcept { return static_cast<const T*>(buffer_.data()); }
  /// @brief The stream of last use (device_buffer::stream()).
  [[nodiscard]] std::optional<stream_view> stream() const noexcept { return buffer_.stream(); }
  /// @brief Declares `s` the stream of last use.
  void set_stream(stream_view s) noexcept { buffer_.set_stream(s); }
  [[nodiscard]] mr::memory_resource* memory_resource() const noexcept { return buffer_.memory_resource(); }
  /// @brief The untyped buffer underneath.
  [[nodiscard]] const device_buffer& buffer() const noexcept { return buffer_; }

  // ---- host access ---------------------------------------------------------------------
  /// @brief Element `i`, copied to the host in order on `s`.
  /// @throws syncmem::logic_error unless i < size()
  [[nodiscard]] T element(std::size_t i, stream_view s) const {
    detail::check_vector_stream(buffer_, "element", s);
    if (i >= size()) detail::throw_vector_index(buffer_, "element", i, size());
    T value;
    buffer_.copy_to_host(&value, sizeof(T), s, i * sizeof(T));
    return value;
  }
  /// @brief Sets element `i` to `value`, in order on `s`; returns when it is set.
  /// @throws syncmem::logic_error unless i < size()
  void set_element(std::size_t i, const T& value, stream_view s) {
    detail::check_vector_stream(buffer_, "set_element", s);
    if (i >= size()) detail::throw_vector_index(buffer_, "set_element", i, size());
    buffer_.copy_from_host(&value, sizeof(T), s, i * sizeof(T));
  }
  /// @brief Copies every element into `host` (exactly size() elements of any
  /// host memory), in order on `s`; returns when `host` holds them.
  /// @throws syncmem::logic_error for another number of elements
  void copy_to_host(std::span<T> host, stream_view s) const {
    detail::check_vector_stream(buffer_, "copy_to_host", s);
    if (host.size() != size()) detail::throw_vector_span(buffer_, "copy_to_host", host.size(), size());
    buffer_.copy_to_host(host.data(), host.size_bytes(), s);
  }
  /// @brief The elements in a new std::vector.
  [[nodiscard]] std::vector<T> to_host(stream_view s) const {
    detail::check_vector_stream(buffer_, "to_host", s);
    std::vector<T> out(size());
    copy_to_host(std::span<T>{out}, s);
    return out;
  }
  /// @brief Copies `host` (exactly size() elements) into the vector, in order on `s`.
  /// @throws syncmem::logic_error for another number of elements
  void copy_from_host(std::span<const T> host, stream_view s) {
    detail::check_vector_stream(buffer_, "copy_from_host", s);
    if (host.size() != size()) detail::throw_vector_span(buffer_, "copy_from_host", host.size(), size());
    buffer_.copy_from_host(host.data(), host.size_bytes(), s);
  }

  /// @brief "device_vector<4-byte elements> of 1000: device_buffer of ..."
  [[nodiscard]] std::string to_string() const {
    return "device_vector of " + std::to_string(size()) + " elements of " + std::to_string(sizeof(T)) +
           " bytes: " + buffer_.to_string();
  }

 private:
  device_buffer buffer_;
};

/// @brief device_vector::to_string().
template <class T>
[[nodiscard]] std::string to_string(const device_vector<T>& v) {
  return v.to_string();
}

}  // namespace syncmem
