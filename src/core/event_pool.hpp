#pragma once

// Events for syncmem's own bookkeeping (the caching pinned resource, the
// transfer engine), reused instead of created for every use: creating a CUDA
// event costs microseconds, recording one a quarter of one.
//
// An event given back may still be pending, and a stream may still have a
// wait on it queued. An emulated one is handed out again only once it has
// completed, so that recording it anew can never release such a wait early
// (the emulated backend counts records per event, not per stream); a CUDA one
// at once, since CUDA ties each wait to the record it saw. Each thread keeps a
// few CUDA events of its own before giving them to the shared pool.

#include <deque>
#include <map>
#include <mutex>

#include "syncmem/device_id.hpp"
#include "syncmem/event.hpp"

namespace syncmem::detail {

class event_pool {
 public:
  // The process-wide pool. Never destroyed: objects destroyed after main()
  // still give their events back.
  [[nodiscard]] static event_pool& instance();

  // An event of `device` that nobody uses: from the pool, or new.
  [[nodiscard]] event acquire(device_id device);
  // Gives `e` back; it may still be pending.
  void release(event&& e) noexcept;
  // Gives back an event known to have completed (no query needed to reuse it).
  void release_completed(event&& e) noexcept;

 private:
  struct per_device {
    std::deque<event> completed;
    std::deque<event> maybe_pending;
  };
  std::mutex mutex_;
  std::map<device_id, per_device> pools_;
};

}  // namespace syncmem::detail
