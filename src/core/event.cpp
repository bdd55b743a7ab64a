#include "syncmem/event.hpp"

#include <utility>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/ignored_failure.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/stream.hpp"

namespace syncmem {

event::event(device_id device, event_options options) : device_{device}, timing_{options.timing} {
  device_guard guard{device};
  handle_ = detail::backend_for(device).create_event(device.index(), options.timing, options.blocking_sync);
}

event::event() : event{current_device()} {}

event::~event() { reset(); }

event::event(event&& other) noexcept
    : device_{other.device_}, handle_{std::exchange(other.handle_, event_handle{})}, timing_{other.timing_} {}

event& event::operator=(event&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, event_handle{});
    timing_ = other.timing_;
  }
  return *this;
}

void event::reset() noexcept {
  if (handle_ == event_handle{}) return;
  try {
    device_guard guard{device_};
    detail::backend_for(device_).destroy_event(device_.index(), handle_);
  } catch (...) {
    // the device is gone; nothing to release
    detail::log_ignored("destroying an event");
  }
  handle_ = event_handle{};
}

event_handle event::handle() const {
  SYNCMEM_EXPECTS(handle_ != event_handle{}, "use of a moved-from syncmem::event");
  return handle_;
}

void event::record(stream_view s) {
  SYNCMEM_EXPECTS(s.device() == device_,
                  fmt::format("an event of {} cannot be recorded on a stream of {}: both must belong to one device",
                              to_string(device_), to_string(s.device())));
  device_guard guard{device_};
  detail::backend_for(device_).record_event(device_.index(), handle(), s.handle());
}

bool event::ready() const {
  device_guard guard{device_};
  return detail::backend_for(device_).event_ready(device_.index(), handle());
}

void event::synchronize() const {
  device_guard guard{device_};
  detail::backend_for(device_).synchronize_event(device_.index(), handle());
}

float event::elapsed_ms(const event& start, const event& end) {
  SYNCMEM_EXPECTS(start.timing_ && end.timing_, "elapsed_ms needs two events made with event_options::timing");
  SYNCMEM_EXPECTS(start.device_ == end.device_, fmt::format("elapsed_ms: events of two devices ({} and {})",
                                                            to_string(start.device_), to_string(end.device_)));
  device_guard guard{start.device_};
  return detail::backend_for(start.device_).elapsed_ms(start.device_.index(), start.handle(), end.handle());
}

}  // namespace syncmem
