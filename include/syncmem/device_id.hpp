#pragma once

/// @file device_id.hpp
/// @brief Strong type naming one device: its kind (CUDA or emulated) and index.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace syncmem {

/// @brief The backend a device belongs to.
enum class device_kind : std::uint8_t {
  cuda = 0,      ///< a GPU driven by the CUDA runtime
  emulated = 1,  ///< an opt-in device made of host memory and worker threads
};

/// @brief How many device kinds there are; their values are 0..device_kind_count-1.
inline constexpr std::size_t device_kind_count = 2;

/// @brief Every device kind, in the order of their values.
inline constexpr std::array<device_kind, device_kind_count> device_kinds{device_kind::cuda, device_kind::emulated};

/// @brief "cuda" or "emulated".
[[nodiscard]] std::string to_string(device_kind kind);

/// @brief The kind `to_string` spells as `name`; nullopt for any other text.
[[nodiscard]] std::optional<device_kind> parse_device_kind(std::string_view name) noexcept;

/// @brief One device: a kind and an index counted among devices of that kind.
///
/// A `device_id` is a plain value; whether it names an existing device is
/// checked where it is used (an invalid index names the valid range).
class device_id {
 public:
  constexpr device_id(device_kind kind, int index) noexcept : index_{index}, kind_{kind} {}
  device_id(device_kind, long) = delete;  // indices are int, as in the CUDA runtime

  /// @brief The CUDA device with this runtime ordinal.
  [[nodiscard]] static constexpr device_id cuda(int index) noexcept { return {device_kind::cuda, index}; }
  /// @brief The emulated device with this index.
  [[nodiscard]] static constexpr device_id emulated(int index) noexcept { return {device_kind::emulated, index}; }

  [[nodiscard]] constexpr device_kind kind() const noexcept { return kind_; }
  [[nodiscard]] constexpr int index() const noexcept { return index_; }

  friend constexpr bool operator==(device_id, device_id) noexcept = default;
  friend constexpr auto operator<=>(device_id a, device_id b) noexcept {
    if (a.kind_ != b.kind_) return a.kind_ <=> b.kind_;
    return a.index_ <=> b.index_;
  }

 private:
  int index_;
  device_kind kind_;
};

/// @brief "cuda:0", "emulated:2".
[[nodiscard]] std::string to_string(device_id id);

}  // namespace syncmem

template <>
struct std::hash<syncmem::device_id> {
  std::size_t operator()(syncmem::device_id id) const noexcept {
    // The index's 32 bits above the kind's 8: distinct for every (kind, index) pair.
    const auto index = static_cast<std::uint64_t>(static_cast<std::uint32_t>(id.index()));
    return std::hash<std::uint64_t>{}((index << 8) | static_cast<std::uint64_t>(id.kind()));
  }
};
