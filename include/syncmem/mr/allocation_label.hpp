#pragma once

/// @file mr/allocation_label.hpp
/// @brief A label for the allocations a thread makes in a scope, so that
/// out-of-memory errors, tracking and snapshots can say what memory was for
/// without widening the allocate() interface.

#include <string>
#include <string_view>

namespace syncmem::mr {

/// @brief The label of the calling thread's allocations now ("" when none).
[[nodiscard]] std::string_view current_allocation_label() noexcept;

/// @brief Sets the calling thread's allocation label for a scope; restores the
/// previous one at its end.
class scoped_allocation_label {
 public:
  explicit scoped_allocation_label(std::string_view label);
  ~scoped_allocation_label();
  scoped_allocation_label(const scoped_allocation_label&) = delete;
  scoped_allocation_label& operator=(const scoped_allocation_label&) = delete;

 private:
  std::string previous_;
};

}  // namespace syncmem::mr
