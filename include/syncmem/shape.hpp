#pragma once

/// @file shape.hpp
/// @brief The extents of an N-d array: 0 to 32 axes of `std::int64_t`,
/// validated on construction, with an overflow-checked element count.

#include <array>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace syncmem {

/// @brief The extents of a row-major N-d array (numpy's `shape`, Caffe's
/// `Blob::shape()`).
///
/// A shape has 0 to `max_axes` axes (Caffe's kMaxBlobAxes); 0 axes is a
/// scalar with one element. Every extent is >= 0, and the product of the
/// nonzero extents fits in `std::int64_t`, so that every partial count
/// (`count(start, end)`) is exact. Construction checks both and throws
/// syncmem::logic_error naming the offending axis; a shape that exists is
/// valid. Axes may be given negative, counted from the end (-1 is the last),
/// as in Caffe's CanonicalAxisIndex and in Python.
///
/// A plain value: no allocation (the extents live inline), cheap to copy.
class shape {
 public:
  /// @brief The most axes a shape may have (Caffe's kMaxBlobAxes).
  static constexpr int max_axes = 32;

  /// @brief A scalar: no axes, one element.
  constexpr shape() noexcept = default;
  /// @brief `shape{2, 3, 4}`.
  /// @throws syncmem::logic_error for more than 32 axes, a negative extent,
  /// or a count that overflows std::int64_t
  shape(std::initializer_list<std::int64_t> extents);
  /// @throws as shape(std::initializer_list)
  explicit shape(std::span<const std::int64_t> extents);
  /// @brief From any integers, e.g. Caffe's `std::vector<int>`.
  /// @throws as shape(std::initializer_list)
  template <std::integral I>
  explicit shape(const std::vector<I>& extents) : shape{std::span<const std::int64_t>{widen(extents)}} {}

  /// @brief The number of axes, 0..32.
  [[nodiscard]] int num_axes() const noexcept { return num_axes_; }
  /// @brief The product of the extents (1 for a scalar, 0 when an extent is 0).
  [[nodiscard]] std::int64_t count() const noexcept { return count_; }
  /// @brief The product of the extents of axes [start, end) (Caffe's count(start, end)).
  /// @throws syncmem::logic_error unless 0 <= start <= end <= num_axes()
  [[nodiscard]] std::int64_t count(int start, int end) const;
  /// @brief The product of the extents from axis `start` to the last.
  /// @throws syncmem::logic_error unless 0 <= start <= num_axes()
  [[nodiscard]] std::int64_t count(int start) const { return count(start, num_axes_); }

  /// @brief The extent of `axis`; negative axes count from the end.
  /// @throws syncmem::logic_error unless -num_axes() <= axis < num_axes()
  [[nodiscard]] std::int64_t operator[](int axis) const {
    return extents_[static_cast<std::size_t>(canonical_axis(axis))];
  }
  /// @brief The same as `operator[]`.
  [[nodiscard]] std::int64_t dim(int axis) const { return (*this)[axis]; }
  /// @brief `axis` in 0..num_axes()-1 (Caffe's CanonicalAxisIndex).
  /// @throws syncmem::logic_error unless -num_axes() <= axis < num_axes()
  [[nodiscard]] int canonical_axis(int axis) const;

  /// @brief The extents.
  [[nodiscard]] std::span<const std::int64_t> extents() const noexcept {
    return {extents_.data(), static_cast<std::size_t>(num_axes_)};
  }
  [[nodiscard]] std::vector<std::int64_t> to_vector() const { return {extents().begin(), extents().end()}; }
  /// @brief This shape with the extent of `axis` (negative counts from the end) replaced.
  /// @throws syncmem::logic_error for a bad axis or extent, or a count that overflows
  [[nodiscard]] shape with_extent(int axis, std::int64_t extent) const;

  /// @brief "(2, 3, 4)"; a scalar is "()" and one axis "(5)".
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const shape& a, const shape& b) noexcept {
    if (a.num_axes_ != b.num_axes_) return false;
    for (int i = 0; i < a.num_axes_; ++i) {
      if (a.extents_[static_cast<std::size_t>(i)] != b.extents_[static_cast<std::size_t>(i)]) return false;
    }
    return true;
  }

 private:
  template <std::integral I>
  static std::vector<std::int64_t> widen(const std::vector<I>& extents) {
    std::vector<std::int64_t> wide;
    wide.reserve(extents.size());
    for (I e : extents) {
      if constexpr (std::is_unsigned_v<I> && sizeof(I) >= sizeof(std::int64_t)) {
        // Larger than int64 max reads as negative, and is refused as such.
        const bool fits = e <= static_cast<I>(std::numeric_limits<std::int64_t>::max());
        wide.push_back(fits ? static_cast<std::int64_t>(e) : -1);
      } else {
        wide.push_back(static_cast<std::int64_t>(e));
      }
    }
    return wide;
  }

  std::array<std::int64_t, max_axes> extents_{};
  std::int64_t count_ = 1;
  int num_axes_ = 0;
};

/// @brief shape::to_string().
[[nodiscard]] inline std::string to_string(const shape& s) { return s.to_string(); }
/// @brief Writes shape::to_string().
std::ostream& operator<<(std::ostream& os, const shape& s);

}  // namespace syncmem
