#pragma once

/// @file event.hpp
/// @brief Events: markers in a stream's work, to wait for or order against.

#include "syncmem/device_id.hpp"

struct CUevent_st;

namespace syncmem {

class stream_view;

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
  /// @brief The native handle: a `cudaEvent_t` for CUDA; opaque otherwise.
  [[nodiscard]] CUevent_st* native_handle() const;

  /// @brief Milliseconds between two completed records of timing events.
  /// @throws syncmem::logic_error unless both were made with timing on.
  [[nodiscard]] static float elapsed_ms(const event& start, const event& end);

 private:
  void reset() noexcept;

  device_id device_;
  CUevent_st* handle_ = nullptr;
  bool timing_ = false;
};

}  // namespace syncmem
