#include "mr/caching/pending_frees.hpp"

#include <algorithm>
#include <exception>
#include <utility>

#include "core/ignored_failure.hpp"
#include "core/log.hpp"

namespace syncmem::mr::detail::caching {

pending_frees::pending_frees(caching_events& events, stream_pools& pools, std::string name)
    : events_{events}, pools_{pools}, name_{std::move(name)}, uses_{recycled_events{&events}} {}

void pending_frees::add_use(block* b, stream_handle s) {
  with_uses_.insert(b);
  if (std::find(b->uses.begin(), b->uses.end(), s) == b->uses.end()) b->uses.push_back(s);
  b->needs_slow_free.store(true, std::memory_order_release);
}

bool pending_frees::hold(block* b, stream_handle freed_on, stream_pool& pool) noexcept {
  b->needs_slow_free.store(false, std::memory_order_relaxed);
  with_uses_.erase(b);
  record_uses(b, freed_on);
  b->uses.clear();
  if (b->pending_uses == 0) return false;
  b->status = block_status::pending;
  b->owner = &pool;
  bytes_ += b->size;
  return true;
}

void pending_frees::add_event(block* b, stream_handle s) {
  event_handle e = events_.record_on(s);
  try {
    uses_.add({events_.device(), s}, std::move(e), b);
  } catch (...) {
    events_.put(e);
    throw;
  }
}

// Uses on other streams: the block waits for events recorded now.
void pending_frees::record_uses(block* b, stream_handle freed_on) noexcept {
  for (stream_handle use : b->uses) {
    if (use == freed_on) continue;
    try {
      add_event(b, use);
    } catch (const std::exception& e) {
      syncmem::detail::report_failure(e,
                                      "{}: recording the use of {} on stream {:#x} failed ({}); waiting for the "
                                      "device instead",
                                      name_, reinterpret_cast<void*>(b->ptr), static_cast<std::uintptr_t>(use),
                                      e.what());
      wait_for_device();
    } catch (...) {
      wait_for_device();
    }
  }
}

void pending_frees::wait_for_device() noexcept {
  try {
    events_.synchronize_device();
  } catch (...) {
    // the device is gone
    syncmem::detail::log_ignored("waiting for the device before reusing freed blocks");
  }
}

void pending_frees::stream_gone(stream_handle s) {
  for (block* b : with_uses_) {
    auto use = std::find(b->uses.begin(), b->uses.end(), s);
    if (use == b->uses.end()) continue;
    add_event(b, s);
    b->uses.erase(use);
  }
  // A new stream may get the handle: its events complete in no order with these.
  uses_.stream_gone({events_.device(), s});
}

void pending_frees::collect() {
  uses_.poll([this](block* b) {
    // A handed-out block whose stream went away waits for its free instead.
    if (b->status != block_status::pending) return;
    bytes_ -= b->size;
    pools_.free_block(b, *b->owner);
  });
}

void pending_frees::synchronize() { uses_.wait_all(); }

void pending_frees::move_owner(const stream_pool& from, stream_pool& to) noexcept {
  uses_.for_each_block([&from, &to](block* b) {
    if (b->status == block_status::pending && b->owner == &from) b->owner = &to;
  });
}

}  // namespace syncmem::mr::detail::caching
