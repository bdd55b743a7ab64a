#include "mr/caching/pending_frees.hpp"

#include <algorithm>
#include <exception>
#include <utility>

#include "core/ignored_failure.hpp"
#include "core/log.hpp"

namespace syncmem::mr::detail::caching {

pending_frees::pending_frees(caching_events& events, stream_pools& pools, std::string name)
    : events_{events}, pools_{pools}, name_{std::move(name)} {}

void pending_frees::add_use(block* b, CUstream_st* s) {
  with_uses_.insert(b);
  if (std::find(b->uses.begin(), b->uses.end(), s) == b->uses.end()) b->uses.push_back(s);
  b->needs_slow_free.store(true, std::memory_order_release);
}

bool pending_frees::hold(block* b, CUstream_st* freed_on, stream_pool& pool) noexcept {
  b->needs_slow_free.store(false, std::memory_order_relaxed);
  with_uses_.erase(b);
  record_uses(b, freed_on);
  b->uses.clear();
  if (b->events.empty()) return false;
  b->status = block_status::pending;
  b->owner = &pool;
  b->link_prev = nullptr;
  b->link_next = first_;
  if (first_ != nullptr) first_->link_prev = b;
  first_ = b;
  bytes_ += b->size;
  return true;
}

// Uses on other streams: the block waits for events recorded now.
void pending_frees::record_uses(block* b, CUstream_st* freed_on) noexcept {
  for (CUstream_st* use : b->uses) {
    if (use == freed_on) continue;
    try {
      CUevent_st* const ev = events_.record_on(use);
      b->events.push_back(ev);
    } catch (const std::exception& e) {
      syncmem::detail::report_failure(e,
                                      "{}: recording the use of {} on stream {} failed ({}); waiting for the "
                                      "device instead",
                                      name_, reinterpret_cast<void*>(b->ptr), static_cast<const void*>(use), e.what());
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

void pending_frees::stream_gone(CUstream_st* s) {
  for (block* b : with_uses_) {
    auto use = std::find(b->uses.begin(), b->uses.end(), s);
    if (use == b->uses.end()) continue;
    CUevent_st* const e = events_.record_on(s);
    b->uses.erase(use);
    b->events.push_back(e);
  }
}

void pending_frees::unlink(block* b) noexcept {
  if (b->link_prev != nullptr) {
    b->link_prev->link_next = b->link_next;
  } else {
    first_ = b->link_next;
  }
  if (b->link_next != nullptr) b->link_next->link_prev = b->link_prev;
  b->link_prev = b->link_next = nullptr;
  bytes_ -= b->size;
}

void pending_frees::collect() {
  for (block* b = first_; b != nullptr;) {
    block* const next = b->link_next;
    if (std::all_of(b->events.begin(), b->events.end(), [this](CUevent_st* e) { return events_.passed(e); })) {
      unlink(b);
      for (CUevent_st* e : b->events) events_.put(e);
      b->events.clear();
      pools_.free_block(b, *b->owner);
    }
    b = next;
  }
}

void pending_frees::synchronize() {
  for (block* b = first_; b != nullptr; b = b->link_next) {
    for (CUevent_st* e : b->events) events_.synchronize(e);
  }
}

void pending_frees::move_owner(const stream_pool& from, stream_pool& to) noexcept {
  for (block* b = first_; b != nullptr; b = b->link_next) {
    if (b->owner == &from) b->owner = &to;
  }
}

}  // namespace syncmem::mr::detail::caching
