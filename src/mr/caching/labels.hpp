#pragma once

// Allocation labels (syncmem/mr/allocation_label.hpp), interned so that the
// allocator's fast path stores a number in the block rather than a string.
// The table is shared by every resource and never shrinks; past max_labels
// distinct texts, new ones share overflow_label.

#include <cstdint>
#include <string>
#include <string_view>

#include "syncmem/mr/allocation_label.hpp"

namespace syncmem::mr::detail::caching {

inline constexpr std::uint32_t no_label = 0;
inline constexpr std::uint32_t overflow_label = 1;
inline constexpr std::uint32_t max_labels = 1U << 16;

// The id of `text` (the same text, the same id).
[[nodiscard]] std::uint32_t intern_label(std::string_view text);

// The text of an id; empty for no_label or an unknown id.
[[nodiscard]] std::string label_text(std::uint32_t id);

// intern_label, remembering this thread's last label so that a label kept
// over many allocations is interned once.
[[nodiscard]] std::uint32_t label_id_of(std::string_view label);

// The id of this thread's current allocation label; no_label costs one call.
[[nodiscard]] inline std::uint32_t current_label_id() {
  const std::string_view label = current_allocation_label();
  return label.empty() ? no_label : label_id_of(label);
}

}  // namespace syncmem::mr::detail::caching
