#pragma once

/// @file event.hpp
/// @brief Events: markers in a stream's work, to wait for or order against.

#include <cstdint>

#include "syncmem/device_id.hpp"

struct CUevent_st;

namespace syncmem {

class stream_view;

/// @brief An event as its backend knows it, opaque to everyone else: the value
/// of a `cudaEvent_t` on a CUDA device, an emulated event on an emulated one.
enum class event_handle : std::uintptr_t {};

/// @brief How an event is made.
struct event_options {
  bool timing = false;         ///< record timestamps (elapsed_ms); off is cheaper
  bool blocking_sync = false;  ///< synchronize() sleeps instead of spinning (CUDA)
};

/// @brief An event of one device. `record(s)` marks the work enqueued on `s`
/// so far; `ready()` and `synchronize()` refer to the latest record, as in the
/// CUDA runtime. An event never recorded is ready.
///
/// Thread safety: like the CUDA runtime's events; recording on one thread
/// while another queries is safe, moving or destroying in use is not.
class event {
 public:
  /// @brief A new event on `device`.
  explicit event(device_id device, event_options options = {});
  /// @brief A new event on the current device.
  event();
  ~event();

  event(const event&) = delete;
  event& operator=(const event&) = delete;
  event(event&& other) noexcept;
  event& operator=(event&& other) noexcept;

  /// @brief Marks the work enqueued on `s` so far.
  /// @throws syncmem::logic_error when `s` belongs to another device (names both).
  void record(stream_view s);
  /// @brief Whether the work before the latest record has completed.
  [[nodiscard]] bool ready() const;
  /// @brief Blocks until the work before the latest record has completed.
  void synchronize() const;

  [[nodiscard]] device_id device() const noexcept { return device_; }
  /// @brief The backend's handle of the event.
  /// @throws syncmem::logic_error on a moved-from event.
  [[nodiscard]] event_handle handle() const;
  /// @brief The handle as a `cudaEvent_t`, for CUDA code; meaningless for an
  /// event of another kind of device.
  [[nodiscard]] CUevent_st* native_handle() const {
    return reinterpret_cast<CUevent_st*>(static_cast<std::uintptr_t>(handle()));  // NOLINT(performance-no-int-to-ptr)
  }

  /// @brief Milliseconds between two completed records of timing events.
  /// @throws syncmem::logic_error unless both were made with timing on.
  [[nodiscard]] static float elapsed_ms(const event& start, const event& end);

 private:
  void reset() noexcept;

  device_id device_;
  event_handle handle_{};
  bool timing_ = false;
};

}  // namespace syncmem
