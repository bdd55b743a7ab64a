#pragma once

// One value per device kind, indexed by the kind: state and tables that differ
// by kind live here rather than in `kind == device_kind::cuda ? a : b`, so that
// a new kind gets a slot of its own instead of silently taking another's.

#include <array>
#include <cstddef>
#include <string_view>

#include "syncmem/device_id.hpp"

namespace syncmem::detail {

template <class T>
struct per_kind {
  std::array<T, device_kind_count> values{};

  [[nodiscard]] constexpr T& operator[](device_kind kind) noexcept { return values[static_cast<std::size_t>(kind)]; }
  [[nodiscard]] constexpr const T& operator[](device_kind kind) const noexcept {
    return values[static_cast<std::size_t>(kind)];
  }
};

// How messages name a kind: its spelling in "cuda:0", and a device of it in prose.
struct device_kind_names {
  std::string_view name;      // "cuda"
  std::string_view a_device;  // "a CUDA", as in "needs a CUDA device"
};

static_assert(device_kind_count == 2, "a new device kind needs its names here");
inline constexpr per_kind<device_kind_names> device_kind_name_table{{{
    {"cuda", "a CUDA"},
    {"emulated", "an emulated"},
}}};

[[nodiscard]] constexpr const device_kind_names& names_of(device_kind kind) noexcept {
  return device_kind_name_table[kind];
}

}  // namespace syncmem::detail
