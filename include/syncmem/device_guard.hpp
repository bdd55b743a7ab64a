#pragma once

/// @file device_guard.hpp
/// @brief RAII switch of the current device for a scope.

#include <optional>

#include "syncmem/device_id.hpp"

namespace syncmem {

/// @brief Makes a device current for the guard's scope and restores the
/// previous one when the scope ends, also by an exception. A no-op (no call
/// into the CUDA runtime beyond reading the current device) when the device
/// is already current, and no call at all inside a guard of the same thread
/// for the same device: syncmem's calls nest guards. Code that changes the
/// CUDA device inside a guard's scope must restore it, or use
/// set_current_device, which the guards see. Every syncmem operation that
/// touches device memory, frees included, runs under one.
///
/// Thread safety: a guard belongs to the thread that made it.
class device_guard {
 public:
  /// @throws syncmem::logic_error when `target` is not a valid device.
  explicit device_guard(device_id target);
  ~device_guard();

  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  device_guard(device_guard&&) = delete;
  device_guard& operator=(device_guard&&) = delete;

  /// @brief The device current before the guard.
  [[nodiscard]] device_id original() const noexcept { return original_; }
  /// @brief The device the guard made current.
  [[nodiscard]] device_id target() const noexcept { return target_; }
  /// @brief Whether the guard had to switch.
  [[nodiscard]] bool switched() const noexcept { return switched_; }

 private:
  device_id original_;
  device_id target_;
  // The current index of the target's backend before, where that backend keeps
  // one and the guard changed it (only the target's kind is switched); -1 when not.
  int original_target_kind_index_;
  // The kind syncmem had selected on this thread before, see set_current_device.
  std::optional<device_kind> original_selected_kind_;
  bool switched_;
  // The guard this one sits inside on this thread, if any: a guard for the
  // device an enclosing guard made current has nothing to read or switch.
  bool outer_active_;
  device_id outer_device_;
};

}  // namespace syncmem
