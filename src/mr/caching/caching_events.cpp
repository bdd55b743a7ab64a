#include "mr/caching/caching_events.hpp"

#include "core/ignored_failure.hpp"
#include "syncmem/device_guard.hpp"

namespace syncmem::mr::detail::caching {

caching_events::caching_events(device_id device)
    : device_{device}, backend_{syncmem::detail::backend_for(device)}, index_{device.index()} {}

event_handle caching_events::get() {
  if (!spare_.empty()) {
    event_handle e = spare_.back();
    spare_.pop_back();
    return e;
  }
  device_guard guard{device_};
  event_handle e = backend_.create_event(index_, false, false);
  try {
    all_.push_back(e);
    spare_.reserve(all_.size());  // so that put never allocates
  } catch (...) {
    if (!all_.empty() && all_.back() == e) all_.pop_back();
    backend_.destroy_event(index_, e);
    throw;
  }
  return e;
}

void caching_events::put(event_handle e) noexcept {
  if (e != event_handle{} && spare_.size() < spare_.capacity()) spare_.push_back(e);
}

event_handle caching_events::record_on(stream_handle s) {
  event_handle e = get();
  try {
    record(e, s);
  } catch (...) {
    put(e);
    throw;
  }
  return e;
}

void caching_events::record(event_handle e, stream_handle s) {
  device_guard guard{device_};
  backend_.record_event(index_, e, s);
}

bool caching_events::passed(event_handle e) { return e == event_handle{} || backend_.event_ready(index_, e); }

void caching_events::synchronize(event_handle e) {
  device_guard guard{device_};
  backend_.synchronize_event(index_, e);
}

void caching_events::order_after(stream_handle other, stream_handle s) {
  event_handle e = record_on(other);
  try {
    wait(s, e);
  } catch (...) {
    put(e);
    throw;
  }
  // A wait holds on to the event as recorded when it was made: it may be
  // recorded again at once.
  put(e);
}

void caching_events::wait(stream_handle s, event_handle e) {
  device_guard guard{device_};
  backend_.stream_wait_event(index_, s, e);
}

void caching_events::synchronize_device() {
  device_guard guard{device_};
  backend_.synchronize_device(index_);
}

void caching_events::destroy_all() noexcept {
  for (event_handle e : all_) {
    try {
      device_guard guard{device_};
      backend_.destroy_event(index_, e);
    } catch (...) {
      // the device is gone
      syncmem::detail::log_ignored("destroying the caching allocator's events");
    }
  }
  all_.clear();
  spare_.clear();
}

}  // namespace syncmem::mr::detail::caching
