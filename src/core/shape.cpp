#include "syncmem/shape.hpp"

#include <limits>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "syncmem/error.hpp"

namespace syncmem {

namespace {

std::string describe(std::span<const std::int64_t> extents) {
  if (extents.size() > 8) {
    return fmt::format("({}, ... {} axes)", fmt::join(extents.first(8), ", "), extents.size());
  }
  return fmt::format("({})", fmt::join(extents, ", "));
}

}  // namespace

shape::shape(std::initializer_list<std::int64_t> extents) : shape{std::span<const std::int64_t>{extents}} {}

shape::shape(std::span<const std::int64_t> extents) {
  SYNCMEM_EXPECTS(
      extents.size() <= static_cast<std::size_t>(max_axes),
      fmt::format("shape {}: {} axes; a shape has at most {} axes", describe(extents), extents.size(), max_axes));
  // The product of the nonzero extents must fit, so that every partial count does.
  std::int64_t nonzero_product = 1;
  bool has_zero = false;
  for (std::size_t i = 0; i < extents.size(); ++i) {
    const std::int64_t e = extents[i];
    SYNCMEM_EXPECTS(e >= 0,
                    fmt::format("shape {}: axis {} has extent {}; extents must be >= 0", describe(extents), i, e));
    if (e == 0) {
      has_zero = true;
      continue;
    }
    SYNCMEM_EXPECTS(
        nonzero_product <= std::numeric_limits<std::int64_t>::max() / e,
        fmt::format("shape {}: the element count overflows a 64-bit integer (at axis {})", describe(extents), i));
    nonzero_product *= e;
  }
  for (std::size_t i = 0; i < extents.size(); ++i) extents_[i] = extents[i];
  num_axes_ = static_cast<int>(extents.size());
  count_ = has_zero ? 0 : nonzero_product;
}

std::int64_t shape::count(int start, int end) const {
  SYNCMEM_EXPECTS(
      start >= 0 && start <= end && end <= num_axes_,
      fmt::format("shape {}: count({}, {}) needs 0 <= start <= end <= {}", to_string(), start, end, num_axes_));
  std::int64_t product = 1;
  for (int i = start; i < end; ++i) product *= extents_[static_cast<std::size_t>(i)];
  return product;
}

int shape::canonical_axis(int axis) const {
  SYNCMEM_EXPECTS(axis >= -num_axes_ && axis < num_axes_,
                  num_axes_ == 0
                      ? fmt::format("axis {} of the scalar shape (): a scalar has no axes", axis)
                      : fmt::format("axis {} is out of range for shape {} with {} axes: valid axes are {}..{}", axis,
                                    to_string(), num_axes_, -num_axes_, num_axes_ - 1));
  return axis < 0 ? axis + num_axes_ : axis;
}

shape shape::with_extent(int axis, std::int64_t extent) const {
  const int i = canonical_axis(axis);
  std::array<std::int64_t, max_axes> copy = extents_;
  copy[static_cast<std::size_t>(i)] = extent;
  return shape{std::span<const std::int64_t>{copy.data(), static_cast<std::size_t>(num_axes_)}};
}

std::string shape::to_string() const { return fmt::format("({})", fmt::join(extents(), ", ")); }

std::ostream& operator<<(std::ostream& os, const shape& s) { return os << s.to_string(); }

}  // namespace syncmem
