#pragma once

// The events of one caching allocator: made on demand, recycled, destroyed
// with it. Not thread-safe: the allocator calls it under its lock.

#include <vector>

#include "backend/backend.hpp"
#include "syncmem/device.hpp"

namespace syncmem::mr::detail::caching {

class caching_events {
 public:
  explicit caching_events(device_id device);
  caching_events(const caching_events&) = delete;
  caching_events& operator=(const caching_events&) = delete;

  // A spare event, or a new one.
  [[nodiscard]] event_handle get();
  // Gives an event back for reuse; never allocates.
  void put(event_handle e) noexcept;
  // A spare event recorded on `s` now (given back if recording fails).
  [[nodiscard]] event_handle record_on(stream_handle s);
  void record(event_handle e, stream_handle s);
  // Whether the work before `e` is done (nullptr: nothing to wait for).
  [[nodiscard]] bool passed(event_handle e);
  // Blocks until the work before `e` is done.
  void synchronize(event_handle e);
  // Makes `s` wait for the work enqueued on `other` so far.
  void order_after(stream_handle other, stream_handle s);
  // Makes `s` wait for `e`.
  void wait(stream_handle s, event_handle e);
  // Blocks until the device is idle (when an event could not be recorded).
  void synchronize_device();
  // Destroys every event made; for the allocator's destructor, once the device is idle.
  void destroy_all() noexcept;

  [[nodiscard]] std::size_t made() const noexcept { return all_.size(); }
  [[nodiscard]] device_id device() const noexcept { return device_; }

 private:
  const device_id device_;
  syncmem::detail::backend& backend_;
  const int index_;
  std::vector<event_handle> spare_;
  std::vector<event_handle> all_;
};

}  // namespace syncmem::mr::detail::caching
